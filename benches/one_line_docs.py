"""Writes the lines of corpus A's documents that are 20 to 200 characters long as one-line
documents (JSONL, `{"text"}`): the short-document side of the mixture benchmarks.

    python3 benches/one_line_docs.py TESTDATA OUT.jsonl
"""
import glob
import json
import sys

with open(sys.argv[2], "w") as out:
    for f in sorted(glob.glob(sys.argv[1] + "/corpora/a/jsonl/*.jsonl")):
        for line in open(f):
            for l in json.loads(line)["text"].split("\n"):
                l = l.strip()
                if 20 <= len(l) <= 200:
                    out.write(json.dumps({"text": l}) + "\n")
