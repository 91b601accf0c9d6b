//! The sections a build registers beyond the built-in tables: an operator crate's
//! [`Section`], found by its table's name when a spec is read.

use std::sync::Arc;

use zephon_operator::{Section, SectionContext, SectionTable, Stage};

use crate::error::{Error, Result};

/// The top-level keys and tables of a spec that the facade itself reads. A registered
/// section may not take one of these names.
pub(crate) const BUILT_IN: &[&str] = &[
    "seed",
    "lanes",
    "rows_per_step",
    "dataset",
    "source",
    "estimate",
    "tokenize",
    "pretokenized",
    "chat",
    "ensure_mixture",
    "images",
    "pack",
    "shuffle",
    "schedule",
    "validation",
    "storage",
    "run",
];

/// Sections registered with a build: each names a spec table and builds its operator from it.
/// A spec read with them ([`crate::Spec::parse_with`]) hands each such table to its section;
/// a table that is neither built in nor registered is refused, naming the registered ones.
///
/// ```
/// # use std::sync::Arc;
/// # use zephon::operator::*;
/// /// `[upper]`: upper-cases the `text` field before tokenization.
/// struct UpperSection;
/// # struct Upper;
/// # impl Operator for Upper {
/// #     fn name(&self) -> &str { "upper" }
/// #     fn fingerprint(&self) -> Settings { Settings::new("upper", 1) }
/// #     fn apply(&self, r: Record, out: &mut Vec<Record>) -> Result<(), OpError> { out.push(r); Ok(()) }
/// # }
/// impl Section for UpperSection {
///     fn name(&self) -> &str { "upper" }
///     fn stage(&self) -> Stage { Stage::Records }
///     fn build(&self, _: &SectionTable, _: &SectionContext) -> Result<Arc<dyn Operator>, String> {
///         Ok(Arc::new(Upper))
///     }
/// }
/// let sections = zephon::Sections::new().with(UpperSection)?;
/// assert_eq!(sections.names(), ["upper"]);
/// # Ok::<(), zephon::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Sections {
    list: Vec<Arc<dyn Section>>,
}

impl Sections {
    /// No sections beyond the built-in tables.
    pub fn new() -> Self {
        Sections::default()
    }

    /// Registers `section`; refused when its name is a built-in table's or another
    /// section's.
    pub fn with(mut self, section: impl Section) -> Result<Self> {
        let name = section.name().to_string();
        if name.is_empty() || BUILT_IN.contains(&name.as_str()) || self.get(&name).is_some() {
            return Err(Error::Build(format!(
                "a section named {name:?} cannot be registered: the name is empty, built in or registered already \
                 (registered: {})",
                self.listed()
            )));
        }
        self.list.push(Arc::new(section));
        Ok(self)
    }

    /// The registered sections' names, in registration order.
    pub fn names(&self) -> Vec<&str> {
        self.list.iter().map(|s| s.name()).collect()
    }

    /// The top-level keys and tables the facade reads itself, which no section may take.
    pub fn built_in_tables() -> &'static [&'static str] {
        BUILT_IN
    }

    /// Whether no section is registered.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<dyn Section>> {
        self.list.iter().find(|s| s.name() == name)
    }

    /// The registered names as a spec writes them, for errors.
    pub(crate) fn listed(&self) -> String {
        if self.list.is_empty() {
            return "none in this build".into();
        }
        self.list.iter().map(|s| format!("[{}]", s.name())).collect::<Vec<_>>().join(", ")
    }

    /// Takes the tables of registered sections out of a spec's top level, in registration
    /// order.
    pub(crate) fn take(&self, mut remove: impl FnMut(&str) -> Option<serde_json::Value>) -> Vec<Registered> {
        self.list
            .iter()
            .filter_map(|s| Some(Registered { section: s.clone(), table: SectionTable::new(remove(s.name())?) }))
            .collect()
    }
}

/// A registered section's table in a spec.
#[derive(Clone, Debug)]
pub struct Registered {
    section: Arc<dyn Section>,
    table: SectionTable,
}

impl Registered {
    /// The section's name.
    pub fn name(&self) -> &str {
        self.section.name()
    }

    /// Where its operator goes.
    pub fn stage(&self) -> Stage {
        self.section.stage()
    }

    /// Its table.
    pub fn table(&self) -> &SectionTable {
        &self.table
    }

    /// Its operator; an error names the spec and the table.
    pub(crate) fn build(&self, context: &SectionContext) -> Result<Arc<dyn zephon_operator::Operator>> {
        self.section.build(&self.table, context).map_err(|m| Error::Spec {
            path: context.spec().to_string(),
            message: format!("[{}] {m}", self.section.name()),
        })
    }
}
