//! Where each assistant message lies in a rendered conversation, for templates without
//! `{% generation %}` blocks.
//!
//! Two methods. The *generated* span of a message is what rendering adds after the
//! conversation before it with the generation prompt: exactly what the model is asked to
//! generate there. It needs the template to render each conversation as a prefix of the next,
//! which common templates do and some do not (Qwen3 drops the `<think>` block of assistant
//! turns before the last user message; early Llama-3 writes an assistant header after every
//! conversation). The *content* span needs no such property: the conversation is rendered again
//! with the message's content replaced by a marker, and the text that differs from the real
//! rendering is the content as the template wrote it (stripped, split, whatever the template
//! does to it), extended over the end-of-turn token that follows it.

use std::ops::Range;

use super::messages::Parsed;
use super::template::{ChatTemplate, MARK};

/// The generated span of each assistant message, or `None` when the template does not render
/// each conversation up to an assistant message as a prefix of the whole, or writes the
/// generation prompt unasked (its trailing header would be taken for the assistant's).
pub(super) fn generated(
    template: &ChatTemplate,
    parsed: &Parsed,
    full: &str,
) -> Result<Option<Vec<Range<usize>>>, String> {
    let mut spans = Vec::with_capacity(parsed.assistant.len());
    for &i in &parsed.assistant {
        let before = template.render_text(&parsed.prefix(i), true)?.text;
        let through = template.render_text(&parsed.prefix(i + 1), false)?.text;
        if !through.starts_with(&before) || !full.starts_with(&through) {
            return Ok(None);
        }
        // A template that writes the generation prompt unasked (early Llama-3) ends every
        // conversation with it, where it would pass for the assistant's: checked where this
        // message ends the conversation (elsewhere what follows it is checked above), so that a
        // prefix-preserving template costs one render more a conversation, not a turn.
        if through.len() == full.len() && template.render_text(&parsed.prefix(i), false)?.text == before {
            return Ok(None);
        }
        spans.push(before.len()..through.len());
    }
    Ok(Some(spans))
}

/// The content span of each assistant message in `full`, each extended over the end-of-turn
/// token right after it: the first of `end_tokens` (special tokens, longest first) that the
/// text after the content starts with.
pub(super) fn content(
    template: &ChatTemplate,
    parsed: &Parsed,
    full: &str,
    end_tokens: &[String],
) -> Result<Vec<Range<usize>>, String> {
    parsed
        .assistant
        .iter()
        .map(|&i| {
            let marked = template.render_text(&parsed.with_content_marked(i), false)?.text;
            if !marked.contains(MARK) {
                return Err(format!("the chat template does not write the content of message {i} (assistant)"));
            }
            let span = differing(full, &marked);
            let end = end_tokens
                .iter()
                .find(|t| full[span.end..].starts_with(t.as_str()))
                .map_or(span.end, |t| span.end + t.len());
            Ok(span.start..end)
        })
        .collect()
}

/// The bytes of `a` that differ from `b`: what lies between their common prefix and their
/// common suffix, on character boundaries.
fn differing(a: &str, b: &str) -> Range<usize> {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let mut start = x.iter().zip(y).take_while(|(p, q)| p == q).count();
    while !a.is_char_boundary(start) {
        start -= 1;
    }
    let room = x.len().min(y.len()) - start;
    let same_tail = x.iter().rev().zip(y.iter().rev()).take(room).take_while(|(p, q)| p == q).count();
    let mut end = x.len() - same_tail;
    while !a.is_char_boundary(end) {
        end += 1;
    }
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_differing_bytes_lie_between_the_common_ends() {
        assert_eq!(differing("<a>hello</a>", "<a>\u{E002}</a>"), 3..8);
        assert_eq!(differing("<a></a>", "<a>\u{E002}</a>"), 3..3);
        // A shared ending is not counted twice: "aa" against "a\u{E002}a".
        assert_eq!(differing("aa", "a\u{E002}a"), 1..1);
        // Private-use characters share their first byte with the marker: the span starts on
        // a character boundary.
        assert_eq!(differing("x\u{E005}y", "x\u{E002}y"), 1..4);
    }
}
