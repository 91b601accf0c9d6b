//! A model's chat template (Jinja), rendered as Hugging Face `transformers` renders it, with
//! the spans of its `{% generation %}` blocks.
//!
//! `transformers` renders in a sandboxed Jinja2 environment with `trim_blocks` and
//! `lstrip_blocks`, `raise_exception`, `strftime_now`, a Python `tojson`, loop controls, and an
//! extension that records the character spans of `{% generation %}` blocks (what
//! `return_assistant_tokens_mask` marks). Here the engine is `minijinja` with the same
//! whitespace rules, Python's string methods (`minijinja-contrib`'s `pycompat`) and the same
//! functions, except one: `strftime_now` would make a conversation's tokens depend on the day
//! it is read, so it is an error; templates that call it for a default date take a
//! `date_string` variable instead. `{% generation %}` is not a `minijinja` tag: the template's
//! text is rewritten to a filter block that wraps the block's output in two private-use
//! characters, whose places give the spans once they are removed.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use minijinja::value::Value as JValue;
use minijinja::{Environment, Error as JError, ErrorKind};
use serde_json::Value as Json;
use sha2::{Digest as _, Sha256};

use crate::tokenizer::Error;

/// Opens a `{% generation %}` block in rendered text.
const OPEN: char = '\u{E000}';
/// Closes it.
const CLOSE: char = '\u{E001}';
/// Stands for an assistant message's content, to find where the template writes it.
pub(crate) const MARK: char = '\u{E002}';
const NAME: &str = "chat";

/// A compiled chat template, identified by the SHA-256 of its source.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Arc<Environment<'static>>,
    source: Arc<str>,
    sha256: String,
    origin: String,
    has_generation: bool,
    /// Variables every render gets (the tokenizer's special tokens, the spec's own).
    globals: Arc<BTreeMap<String, Json>>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("origin", &self.origin)
            .field("sha256", &self.sha256)
            .field("generation_blocks", &self.has_generation)
            .finish_non_exhaustive()
    }
}

/// A conversation rendered: the text, and the byte spans of its `{% generation %}` blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    /// The text to tokenize.
    pub text: String,
    /// Byte ranges of `text` that `{% generation %}` blocks produced, in order.
    pub generation: Vec<Range<usize>>,
}

impl ChatTemplate {
    /// A template from its source; `origin` names it in errors.
    pub fn new(source: &str, origin: &str) -> Result<Self, Error> {
        let bad = |message: String| Error::Template { origin: origin.to_string(), message };
        let has_generation = find_generation_tags(source);
        let rewritten = rewrite_generation(source);
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| bad(e.to_string()))?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("zephon_generation", |body: String| format!("{OPEN}{body}{CLOSE}"));
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", |message: String| -> Result<JValue, JError> {
            Err(JError::new(ErrorKind::InvalidOperation, message))
        });
        env.add_function("strftime_now", |_: JValue| -> Result<JValue, JError> {
            Err(JError::new(
                ErrorKind::InvalidOperation,
                "strftime_now would make the tokens depend on the day they are read: give the template its date \
                 (e.g. date_string) in the chat settings",
            ))
        });
        // Jinja2's `iterable` is false for none, which templates test before iterating.
        env.add_test("iterable", |v: JValue| !v.is_none() && !v.is_undefined() && v.try_iter().is_ok());
        env.add_template_owned(NAME, rewritten).map_err(|e| bad(describe(&e)))?;
        let mut h = Sha256::new();
        h.update(source.as_bytes());
        Ok(ChatTemplate {
            env: Arc::new(env),
            source: source.into(),
            sha256: hex::encode(h.finalize()),
            origin: origin.to_string(),
            has_generation,
            globals: Arc::new(BTreeMap::new()),
        })
    }

    /// The template of a Hugging Face `tokenizer_config.json` (its `chat_template`, or with
    /// `name` the named one of a list of templates), with the file's special tokens
    /// (`bos_token`, `eos_token`, ...) as variables, as `transformers` passes them.
    pub fn from_tokenizer_config(path: &std::path::Path, name: Option<&str>) -> Result<Self, Error> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| Error::Read { path: shown.clone(), source })?;
        let json: Json = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Template { origin: shown.clone(), message: format!("not JSON: {e}") })?;
        let bad = |message: String| Error::Template { origin: shown.clone(), message };
        let source = match (&json["chat_template"], name) {
            (Json::String(s), None | Some("default")) => s.clone(),
            (Json::Array(list), want) => {
                let want = want.unwrap_or("default");
                let found = list.iter().find(|t| t["name"].as_str() == Some(want));
                match found.and_then(|t| t["template"].as_str()) {
                    Some(s) => s.to_string(),
                    None => {
                        let names: Vec<&str> = list.iter().filter_map(|t| t["name"].as_str()).collect();
                        return Err(bad(format!("no chat template named {want:?} (it has {names:?})")));
                    }
                }
            }
            (Json::String(_), Some(n)) => return Err(bad(format!("one chat template, not one named {n:?}"))),
            (Json::Null, _) => return Err(bad("no chat_template".into())),
            (other, _) => return Err(bad(format!("chat_template is {other}, not text or a list"))),
        };
        let mut globals = BTreeMap::new();
        for key in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"] {
            // A special token is text, or an `AddedToken` object with its text in `content`.
            let token = match &json[key] {
                Json::String(s) => Some(s.clone()),
                Json::Object(o) => o.get("content").and_then(Json::as_str).map(str::to_string),
                _ => None,
            };
            if let Some(t) = token {
                globals.insert(key.to_string(), Json::String(t));
            }
        }
        Ok(ChatTemplate::new(&source, &shown)?.with_globals(globals))
    }

    /// Adds variables every render gets (they override the tokenizer's special tokens).
    #[must_use]
    pub fn with_globals(mut self, vars: BTreeMap<String, Json>) -> Self {
        Arc::make_mut(&mut self.globals).extend(vars);
        self
    }

    /// SHA-256 of the template's source.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Where the template came from (a file).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The variables every render gets.
    pub fn globals(&self) -> &BTreeMap<String, Json> {
        &self.globals
    }

    /// Whether the template marks what the assistant generates with `{% generation %}`.
    pub fn has_generation_blocks(&self) -> bool {
        self.has_generation
    }

    /// Renders `messages` (a JSON array, as stored) with `add_generation_prompt`. A template
    /// that fails gives its own message (e.g. from `raise_exception`) in
    /// [`Error::Template`].
    pub fn render(&self, messages: &JValue, add_generation_prompt: bool) -> Result<Rendered, Error> {
        self.render_text(messages, add_generation_prompt)
            .map_err(|message| Error::Template { origin: self.origin.clone(), message })
    }

    /// [`ChatTemplate::render`] with the template's message alone as the error: what a bad
    /// record says (the operator names the template once, in its plan).
    pub(crate) fn render_text(&self, messages: &JValue, add_generation_prompt: bool) -> Result<Rendered, String> {
        let mut ctx: BTreeMap<String, JValue> =
            self.globals.iter().map(|(k, v)| (k.clone(), JValue::from(minijinja::value::Serde(v)))).collect();
        ctx.insert("messages".into(), messages.clone());
        ctx.insert("add_generation_prompt".into(), JValue::from(add_generation_prompt));
        let template = self.env.get_template(NAME).map_err(|e| describe(&e))?;
        let raw = template.render(JValue::from(minijinja::value::Serde(&ctx))).map_err(|e| describe(&e))?;
        let mut text = String::with_capacity(raw.len());
        let mut generation = Vec::new();
        let mut open: Option<usize> = None;
        for c in raw.chars() {
            match c {
                OPEN => open = Some(text.len()),
                CLOSE => {
                    if let Some(start) = open.take() {
                        generation.push(start..text.len());
                    }
                }
                c => text.push(c),
            }
        }
        Ok(Rendered { text, generation })
    }
}

/// Whether a conversation's text could be taken for the span markers.
pub(crate) fn holds_markers(s: &str) -> bool {
    s.contains([OPEN, CLOSE, MARK])
}

/// The error as the template author wrote it, with the line it came from.
fn describe(e: &JError) -> String {
    let mut out = match e.detail() {
        Some(d) => d.to_string(),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        out.push_str(&format!(" (template line {line})"));
    }
    out
}

/// Whether the template text holds a `{% generation %}` tag (as `transformers` looks for it).
fn find_generation_tags(source: &str) -> bool {
    tag_positions(source, "generation").next().is_some()
}

/// `{% generation %}` and `{% endgeneration %}` as a filter block, whitespace control kept:
/// a block tag stays a block tag, so `trim_blocks` and `lstrip_blocks` act on it as in Jinja2.
fn rewrite_generation(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let mut at = 0;
    let mut tags: Vec<(Range<usize>, &str, bool, bool)> = tag_positions(source, "generation")
        .map(|(r, l, t)| (r, "filter zephon_generation", l, t))
        .chain(tag_positions(source, "endgeneration").map(|(r, l, t)| (r, "endfilter", l, t)))
        .collect();
    tags.sort_by_key(|t| t.0.start);
    for (range, name, left, right) in tags {
        out.push_str(&source[at..range.start]);
        out.push_str(if left { "{%- " } else { "{% " });
        out.push_str(name);
        out.push_str(if right { " -%}" } else { " %}" });
        at = range.end;
    }
    out.push_str(&source[at..]);
    out
}

/// Each `{% <word> %}` tag in `source` (with optional `-` or `+` whitespace control): its byte
/// range and whether it trims left and right.
fn tag_positions<'a>(source: &'a str, word: &'a str) -> impl Iterator<Item = (Range<usize>, bool, bool)> + 'a {
    let bytes = source.as_bytes();
    let mut from = 0;
    std::iter::from_fn(move || {
        while let Some(i) = source[from..].find("{%").map(|i| i + from) {
            from = i + 2;
            let mut j = i + 2;
            let left = matches!(bytes.get(j), Some(b'-'));
            if matches!(bytes.get(j), Some(b'-' | b'+')) {
                j += 1;
            }
            while bytes.get(j).is_some_and(u8::is_ascii_whitespace) {
                j += 1;
            }
            if !source[j..].starts_with(word) {
                continue;
            }
            j += word.len();
            if bytes.get(j).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                continue;
            }
            while bytes.get(j).is_some_and(u8::is_ascii_whitespace) {
                j += 1;
            }
            let right = matches!(bytes.get(j), Some(b'-'));
            if matches!(bytes.get(j), Some(b'-' | b'+')) {
                j += 1;
            }
            if source[j..].starts_with("%}") {
                from = j + 2;
                return Some((i..j + 2, left, right));
            }
        }
        None
    })
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=...)`, as
/// `transformers` defines `tojson` for chat templates: `", "` and `": "` separators on one line,
/// `","` with an indent, keys in their order (the conversation's, as stored).
fn tojson(value: JValue, kwargs: minijinja::value::Kwargs) -> Result<JValue, JError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_py_json(&value, indent, sort_keys.unwrap_or(false), 0, &mut out)?;
    Ok(JValue::from_safe_string(out))
}

/// Writes `v` as Python's `json.dumps` does (see [`tojson`]).
fn write_py_json(v: &JValue, indent: Option<usize>, sort: bool, depth: usize, out: &mut String) -> Result<(), JError> {
    use minijinja::value::ValueKind;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let sep = if indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match v.as_i64() {
            Some(i) if v.is_integer() => out.push_str(&i.to_string()),
            _ => out.push_str(&py_float(f64::try_from(v.clone()).unwrap_or(f64::NAN))),
        },
        ValueKind::String => out.push_str(&py_string(v.as_str().unwrap_or_default())),
        ValueKind::Map => {
            let mut keys: Vec<JValue> = v.try_iter()?.collect();
            if sort {
                keys.sort_by_key(|k| k.to_string());
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                out.push_str(&py_string(&k.to_string()));
                out.push_str(": ");
                write_py_json(&v.get_item(k)?, indent, sort, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<JValue> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                write_py_json(item, indent, sort, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        other => return Err(JError::new(ErrorKind::BadSerialization, format!("tojson cannot write {other}"))),
    }
    Ok(())
}

/// A JSON string as Python writes it with `ensure_ascii=False`: only `"`, `\` and control
/// characters are escaped.
fn py_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A float as Python's `repr` writes it (`1.0`, `0.1`, `1e-05`).
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if f == f.trunc() && f.abs() < 1e16 {
        return format!("{f:.1}");
    }
    let s = format!("{f:?}");
    // Rust writes 1e-5 as "1e-5"; Python as "1e-05".
    match s.split_once('e') {
        Some((m, e)) => {
            let (sign, digits) = e.strip_prefix('-').map_or(("+", e), |d| ("-", d));
            format!("{m}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as the chat operator reads them: from their JSON text, keys in order.
    fn msgs(text: &str) -> JValue {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn generation_blocks_become_spans_and_whitespace_control_is_kept() {
        let t = ChatTemplate::new(
            "{% for m in messages %}<{{ m.role }}>{%- if m.role == 'assistant' %}\n{% generation %}{{ m.content }}!{% endgeneration %}\n{%- else %}{{ m.content }}{% endif %}\n{% endfor %}",
            "test",
        )
        .unwrap();
        assert!(t.has_generation_blocks());
        let r = t
            .render(&msgs(r#"[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]"#), false)
            .unwrap();
        // As Jinja2 renders it with trim_blocks and lstrip_blocks.
        assert_eq!(r.text, "<user>hi<assistant>yo!");
        assert_eq!(&r.text[r.generation[0].clone()], "yo!");
    }

    #[test]
    fn python_methods_json_and_errors_behave_as_in_transformers() {
        let t = ChatTemplate::new(
            "{{ messages[0].content.strip() }}|{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}{% if messages | length > 1 %}{{ raise_exception('only one') }}{% endif %}",
            "test",
        )
        .unwrap();
        let one = msgs(r#"[{"role": "user", "content": " é<x> ", "n": 1.5}]"#);
        assert_eq!(
            t.render(&one, false).unwrap().text,
            "é<x>|{\"role\": \"user\", \"content\": \" é<x> \", \"n\": 1.5}|{\n  \"role\": \"user\",\n  \"content\": \" é<x> \",\n  \"n\": 1.5\n}"
        );
        let two = msgs(r#"[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]"#);
        assert!(t.render(&two, false).unwrap_err().to_string().contains("only one"));
        let dated = ChatTemplate::new("{{ strftime_now('%d') }}", "t").unwrap();
        assert!(dated.render(&one, false).unwrap_err().to_string().contains("date_string"));
        assert!(ChatTemplate::new("{% if %}", "t").is_err());
    }

    #[test]
    fn python_floats_and_tags_are_found_as_jinja_writes_them() {
        assert_eq!(
            (py_float(1.0), py_float(0.1), py_float(1e-5), py_float(2.5e20)),
            ("1.0".into(), "0.1".into(), "1e-05".into(), "2.5e+20".into())
        );
        assert!(find_generation_tags("a{%- generation -%}b{% endgeneration %}"));
        assert!(!find_generation_tags("{% generations %}{{ generation }}"));
        assert_eq!(
            rewrite_generation("{%- generation +%}x{% endgeneration -%}"),
            "{%- filter zephon_generation %}x{% endfilter -%}"
        );
    }
}
