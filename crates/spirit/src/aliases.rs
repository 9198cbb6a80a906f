//! Index aliases, as in Elasticsearch: a second name for one or more indices. Searches through an alias
//! search every index it names; single-document reads and writes go through an alias that names exactly one.
//! The usual use is a re-index without downtime: build `logs-v2` beside `logs-v1`, then move the alias
//! `logs` from one to the other in one atomic [`Engine::update_aliases`](crate::Engine::update_aliases)
//! call, so no reader ever sees neither or both.
//!
//! The set of aliases is the engine's (one data directory), kept in `DIR/aliases.json` and replaced whole
//! on every change (temporary file, fsync, rename, fsync of the directory): a crash leaves the old set or
//! the new one, never a mix. An alias and an index never share a name, and deleting an index takes it out
//! of every alias (an alias naming no index is gone).

use crate::engine::{load_json, store_json, validate_index_name};
use crate::error::{Error, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The file, in the data directory, holding the aliases.
pub const ALIASES_FILE: &str = "aliases.json";

/// One change to the aliases ([`Aliases::applied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasAction {
    /// `alias` names `index` too (the alias is created if new).
    Add { index: String, alias: String },
    /// `alias` no longer names `index`; with `must_exist`, an error if it did not.
    Remove { index: String, alias: String, must_exist: bool },
}

/// Every alias of a data directory: alias name → the indices it names.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Aliases {
    aliases: BTreeMap<String, BTreeSet<String>>,
}

impl Aliases {
    /// The aliases stored in `dir` (none if it holds no alias file).
    pub(crate) fn load(dir: &Path) -> Result<Aliases> {
        load_json(dir, ALIASES_FILE)
    }

    /// Replaces the alias file in `dir` durably (a crash leaves the old set or the new one).
    pub(crate) fn store(&self, dir: &Path) -> Result<()> {
        store_json(dir, ALIASES_FILE, self)
    }

    /// The indices `alias` names, if it is an alias.
    pub fn get(&self, alias: &str) -> Option<&BTreeSet<String>> {
        self.aliases.get(alias)
    }

    /// Every alias with the indices it names, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &BTreeSet<String>)> {
        self.aliases.iter()
    }

    /// The aliases that name `index`, in name order.
    pub fn of_index(&self, index: &str) -> Vec<String> {
        self.aliases.iter().filter(|(_, ix)| ix.contains(index)).map(|(a, _)| a.clone()).collect()
    }

    /// These aliases with `actions` applied in order, all or none: an error (and nothing changed) if an
    /// action adds to an index that does not exist (`index_exists`), uses an invalid alias name or the name
    /// of an index, or removes (with `must_exist`) an alias the index does not have.
    pub fn applied(&self, actions: &[AliasAction], index_exists: impl Fn(&str) -> bool) -> Result<Aliases> {
        let mut next = self.clone();
        for a in actions {
            match a {
                AliasAction::Add { index, alias } => {
                    if !index_exists(index) {
                        return Err(Error::NotFound(format!("no such index [{index}]")));
                    }
                    validate_index_name(alias).map_err(|_| {
                        Error::InvalidArgument(format!(
                            "invalid alias name [{alias}]: use lowercase letters, digits, '_', '-', '.', '+', \
                             not starting with _ - + ."
                        ))
                    })?;
                    if index_exists(alias) {
                        return Err(Error::InvalidArgument(format!(
                            "an index exists with the same name as the alias [{alias}]"
                        )));
                    }
                    next.aliases.entry(alias.clone()).or_default().insert(index.clone());
                }
                AliasAction::Remove { index, alias, must_exist } => {
                    let removed = next.aliases.get_mut(alias).is_some_and(|ix| ix.remove(index));
                    if !removed && *must_exist {
                        return Err(Error::NotFound(format!(
                            "aliases [{alias}] missing for index [{index}]"
                        )));
                    }
                    if next.aliases.get(alias).is_some_and(|ix| ix.is_empty()) {
                        next.aliases.remove(alias);
                    }
                }
            }
        }
        Ok(next)
    }

    /// These aliases without `index` in any of them (an alias left naming nothing is dropped).
    pub fn without_index(&self, index: &str) -> Aliases {
        let mut next = self.clone();
        next.aliases.retain(|_, ix| {
            ix.remove(index);
            !ix.is_empty()
        });
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(index: &str, alias: &str) -> AliasAction {
        AliasAction::Add { index: index.into(), alias: alias.into() }
    }

    fn remove(index: &str, alias: &str, must_exist: bool) -> AliasAction {
        AliasAction::Remove { index: index.into(), alias: alias.into(), must_exist }
    }

    fn names(a: &Aliases, alias: &str) -> Vec<String> {
        a.get(alias).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    #[test]
    fn actions_apply_in_order_all_or_none() {
        let exists = |i: &str| ["a", "b"].contains(&i);
        let x = Aliases::default().applied(&[add("a", "x"), add("b", "x"), add("a", "y")], exists).unwrap();
        assert_eq!(names(&x, "x"), ["a", "b"]);
        assert_eq!(x.of_index("a"), ["x", "y"]);
        // A swap: remove and add in one step.
        let swapped = x.applied(&[remove("a", "y", true), add("b", "y")], exists).unwrap();
        assert_eq!(names(&swapped, "y"), ["b"]);
        // The last index out drops the alias.
        let gone = swapped.applied(&[remove("b", "y", true)], exists).unwrap();
        assert!(gone.get("y").is_none());
        // Any failing action leaves everything as it was (the caller keeps `x`).
        assert!(matches!(x.applied(&[add("b", "z"), add("c", "z")], exists), Err(Error::NotFound(_))));
        assert!(
            matches!(x.applied(&[add("a", "b")], exists), Err(Error::InvalidArgument(_))),
            "an index's name"
        );
        assert!(matches!(x.applied(&[add("a", "_x")], exists), Err(Error::InvalidArgument(_))));
        assert!(matches!(x.applied(&[remove("b", "y", true)], exists), Err(Error::NotFound(_))));
        assert_eq!(x.applied(&[remove("b", "y", false)], exists).unwrap(), x, "a missing alias is fine");
    }

    #[test]
    fn deleting_an_index_takes_it_out_of_every_alias() {
        let exists = |i: &str| ["a", "b"].contains(&i);
        let x = Aliases::default().applied(&[add("a", "x"), add("b", "x"), add("a", "y")], exists).unwrap();
        let y = x.without_index("a");
        assert_eq!(names(&y, "x"), ["b"]);
        assert!(y.get("y").is_none());
    }

    #[test]
    fn stores_and_loads() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Aliases::load(dir.path()).unwrap(), Aliases::default());
        let x = Aliases::default().applied(&[add("a", "x")], |_| true).unwrap_err();
        assert!(matches!(x, Error::InvalidArgument(_)), "'x' would be an index too");
        let x = Aliases::default().applied(&[add("a", "x")], |i| i == "a").unwrap();
        x.store(dir.path()).unwrap();
        assert_eq!(Aliases::load(dir.path()).unwrap(), x);
        std::fs::write(dir.path().join(ALIASES_FILE), b"{not json").unwrap();
        assert!(matches!(Aliases::load(dir.path()), Err(Error::Format(_))));
    }
}
