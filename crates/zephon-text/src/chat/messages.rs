//! A conversation as stored: a JSON array of messages, checked before any template sees it.

use minijinja::value::Value as JValue;
use serde_json::Value as Json;

use super::template::{MARK, holds_markers};

/// A checked conversation: as the template gets it (key order kept), and which messages are
/// the assistant's.
pub(crate) struct Parsed {
    pub value: JValue,
    messages: Vec<JValue>,
    /// Indexes of the assistant's messages.
    pub assistant: Vec<usize>,
}

impl Parsed {
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// The first `n` messages, as a conversation.
    pub fn prefix(&self, n: usize) -> JValue {
        JValue::from(self.messages[..n.min(self.messages.len())].to_vec())
    }

    /// The conversation with message `i`'s content replaced by the marker: text content
    /// becomes the marker, and in a list of parts each text part's `text` does (keys keep
    /// their order). Its `reasoning_content`, where it has one (Qwen3's templates write it in
    /// a `<think>` block before the content), is marked too: the assistant wrote it.
    pub fn with_content_marked(&self, i: usize) -> JValue {
        let mark = JValue::from(MARK.to_string());
        let replace = |v: &JValue, marked: &[&str], with: &dyn Fn(JValue) -> JValue| -> JValue {
            let Ok(keys) = v.try_iter() else { return v.clone() };
            JValue::from_pairs(keys.map(|k| {
                let item = v.get_item(&k).unwrap_or_default();
                let item = if k.as_str().is_some_and(|k| marked.contains(&k)) { with(item) } else { item };
                (k, item)
            }))
        };
        let content = |c: JValue| -> JValue {
            if c.as_str().is_some() {
                return mark.clone();
            }
            match c.try_iter() {
                Ok(parts) => parts
                    .map(|p| match p.get_attr("type").ok().as_ref().and_then(JValue::as_str) {
                        Some("text") => replace(&p, &["text"], &|_| mark.clone()),
                        _ => p,
                    })
                    .collect(),
                Err(_) => c,
            }
        };
        let mut messages = self.messages.clone();
        if let Some(m) = messages.get_mut(i) {
            *m = replace(m, &["content", "reasoning_content"], &content);
        }
        JValue::from(messages)
    }
}

/// Parses and checks `text`: an array of objects, each with a `role` among `roles` and a
/// `content` that is text or a list of parts (objects with a `type`). The message that breaks
/// a rule is named in the error.
pub(crate) fn parse(text: &str, roles: &[String]) -> Result<Parsed, String> {
    let json: Json = serde_json::from_str(text).map_err(|e| format!("the conversation is not JSON: {e}"))?;
    let Json::Array(list) = &json else {
        return Err(format!("the conversation is {}, not a list of messages", kind(&json)));
    };
    if list.is_empty() {
        return Err("the conversation has no messages".into());
    }
    let mut assistant = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let Json::Object(fields) = m else { return Err(format!("message {i} is {}, not an object", kind(m))) };
        let role = match fields.get("role") {
            Some(Json::String(r)) => r,
            Some(other) => return Err(format!("message {i}: role is {}, not text", kind(other))),
            None => return Err(format!("message {i} has no role")),
        };
        if !roles.iter().any(|r| r == role) {
            return Err(format!("message {i} has role {role:?}, which is none of {roles:?}"));
        }
        match fields.get("content") {
            Some(Json::String(_)) => {}
            Some(Json::Array(parts)) => {
                if let Some((j, p)) =
                    parts.iter().enumerate().find(|(_, p)| !p.get("type").is_some_and(Json::is_string))
                {
                    return Err(format!("message {i}: content part {j} is {}, not an object with a type", kind(p)));
                }
            }
            None | Some(Json::Null) => return Err(format!("message {i} ({role}) has no content")),
            Some(other) => return Err(format!("message {i} ({role}): content is {}, not text or parts", kind(other))),
        }
        if role == "assistant" {
            assistant.push(i);
        }
    }
    if holds_markers(text) {
        return Err("the conversation holds the private-use characters U+E000, U+E001 or U+E002, which mark \
                    the assistant's spans while rendering"
            .into());
    }
    // The template sees the messages as stored, keys in their order (`tojson` writes them so).
    let value: JValue = serde_json::from_str(text).map_err(|e| format!("the conversation is not JSON: {e}"))?;
    let messages: Vec<JValue> = value.try_iter().map_err(|e| e.to_string())?.collect();
    Ok(Parsed { value, messages, assistant })
}

fn kind(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "text",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles() -> Vec<String> {
        ["system", "user", "assistant"].iter().map(|r| r.to_string()).collect()
    }

    #[test]
    fn every_broken_rule_names_the_message() {
        for (text, want) in [
            ("{", "not JSON"),
            ("{}", "an object, not a list of messages"),
            ("[]", "no messages"),
            ("[1]", "message 0 is a number"),
            (r#"[{"content": "x"}]"#, "message 0 has no role"),
            (
                r#"[{"role": "user", "content": "x"}, {"role": "narrator", "content": "y"}]"#,
                "message 1 has role \"narrator\"",
            ),
            (r#"[{"role": "user"}]"#, "message 0 (user) has no content"),
            (r#"[{"role": "user", "content": null}]"#, "message 0 (user) has no content"),
            (r#"[{"role": "user", "content": 3}]"#, "content is a number"),
            (r#"[{"role": "user", "content": [{"text": "x"}]}]"#, "content part 0"),
            ("[{\"role\": \"user\", \"content\": \"a\u{E000}\"}]", "private-use"),
        ] {
            let e = parse(text, &roles()).err().unwrap_or_default();
            assert!(e.contains(want), "{text}: {e}");
        }
        let p = parse(r#"[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "z": 1}]"#, &roles())
            .unwrap();
        assert_eq!((p.len(), p.assistant.clone()), (2, vec![1]));
        assert_eq!(p.prefix(1).len(), Some(1));
    }
}
