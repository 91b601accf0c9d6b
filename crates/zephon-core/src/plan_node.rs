//! A run described for people, as a tree: `explain`, the CLI's plan and reports are all
//! formatted from it, by one renderer ([`PlanNode::indent`]), instead of each building its own
//! strings.

use std::fmt;

/// One part of a run: a name, a one-line description, and its parts.
///
/// ```
/// use zephon_core::PlanNode;
/// let plan = PlanNode::new("operators", "")
///     .with(PlanNode::new("tokenize", "stateless, on any thread"))
///     .with(PlanNode::new("pack", "accumulator, per lane"));
/// assert_eq!(plan.indent(), "operators\n  tokenize: stateless, on any thread\n  pack: accumulator, per lane\n");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanNode {
    /// What the part is (`datasets`, `[0] web`, `tokenize`).
    pub name: String,
    /// One line about it (empty for a heading).
    pub detail: String,
    /// Its parts, in order.
    pub children: Vec<PlanNode>,
}

impl PlanNode {
    /// A part with no parts of its own yet.
    pub fn new(name: impl Into<String>, detail: impl Into<String>) -> Self {
        PlanNode { name: name.into(), detail: detail.into(), children: Vec::new() }
    }

    /// Adds a part.
    #[must_use]
    pub fn with(mut self, child: PlanNode) -> Self {
        self.children.push(child);
        self
    }

    /// Adds parts.
    #[must_use]
    pub fn with_all(mut self, children: impl IntoIterator<Item = PlanNode>) -> Self {
        self.children.extend(children);
        self
    }

    /// The tree as text: one line a part (`name: detail`), each part's parts two spaces in.
    pub fn indent(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        out.push_str(&"  ".repeat(depth));
        out.push_str(&self.name);
        if !self.detail.is_empty() {
            out.push_str(": ");
            out.push_str(&self.detail);
        }
        out.push('\n');
        for c in &self.children {
            c.write(out, depth + 1);
        }
    }
}

impl fmt::Display for PlanNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.indent())
    }
}
