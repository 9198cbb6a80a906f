//! Index aliases, as in Elasticsearch: a second name for one or more indices. Searches through an alias
//! search every index it names; single-document reads and writes go through an alias that names exactly one.
//! The usual use is a re-index without downtime: build `logs-v2` beside `logs-v1`, then move the alias
//! `logs` from one to the other in one atomic [`Engine::update_aliases`](crate::Engine::update_aliases)
//! call, so no reader ever sees neither or both.
//!
//! Writes through an alias go to its *write index*: the index added with `is_write_index: true` (at most one
//! per alias), or else its only index unless that one was added with `is_write_index: false` — an alias of
//! several indices without one has none, and writes through it are refused (Elasticsearch's rollover layout:
//! searches span every generation, writes go to the newest).
//!
//! An alias may *filter* an index it names: a query (Elasticsearch's query DSL, kept here as given — the
//! engine does not read it) that searches through the alias apply to that index's documents, so one index
//! can serve several tenants, each through its own alias. Gets and writes through an alias ignore its filter,
//! as in Elasticsearch.
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
#[derive(Debug, Clone, PartialEq)]
pub enum AliasAction {
    /// `alias` names `index` too (the alias is created if new; adding it again replaces its
    /// `is_write_index` and `filter` there).
    Add { index: String, alias: String, is_write_index: Option<bool>, filter: Option<serde_json::Value> },
    /// `alias` no longer names `index`; with `must_exist`, an error if it did not.
    Remove { index: String, alias: String, must_exist: bool },
}

/// Every alias of a data directory: alias name → the indices it names, each with its `is_write_index`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Aliases {
    aliases: BTreeMap<String, BTreeMap<String, Option<bool>>>,
    /// Alias → index → the filter searches through the alias apply to that index (absent in files written
    /// before filters existed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    filters: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
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

    /// The indices `alias` names (in name order), if it is an alias.
    pub fn get(&self, alias: &str) -> Option<BTreeSet<String>> {
        self.aliases.get(alias).map(|ix| ix.keys().cloned().collect())
    }

    /// Every alias with the indices it names, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, impl Iterator<Item = &String>)> {
        self.aliases.iter().map(|(a, ix)| (a, ix.keys()))
    }

    /// The aliases that name `index`, in name order, each with its `is_write_index` there.
    pub fn of_index(&self, index: &str) -> Vec<(String, Option<bool>)> {
        self.aliases.iter().filter_map(|(a, ix)| ix.get(index).map(|w| (a.clone(), *w))).collect()
    }

    /// The filter searches through `alias` apply to `index`, if it has one there.
    pub fn filter(&self, alias: &str, index: &str) -> Option<&serde_json::Value> {
        self.filters.get(alias)?.get(index)
    }

    /// The index writes through `alias` go to, if it has one (see the module doc).
    pub fn write_index(&self, alias: &str) -> Option<&str> {
        let ix = self.aliases.get(alias)?;
        match ix.iter().find(|(_, w)| **w == Some(true)) {
            Some((i, _)) => Some(i),
            None if ix.len() == 1 => ix.iter().find(|(_, w)| **w != Some(false)).map(|(i, _)| i.as_str()),
            None => None,
        }
    }

    /// These aliases with `actions` applied in order, all or none: an error (and nothing changed) if an
    /// action adds to an index that does not exist (`index_exists`), uses an invalid alias name or the name
    /// of an index, or removes (with `must_exist`) an alias the index does not have.
    pub fn applied(&self, actions: &[AliasAction], index_exists: impl Fn(&str) -> bool) -> Result<Aliases> {
        let mut next = self.clone();
        for a in actions {
            match a {
                AliasAction::Add { index, alias, is_write_index, filter } => {
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
                    next.aliases.entry(alias.clone()).or_default().insert(index.clone(), *is_write_index);
                    match filter {
                        Some(f) => {
                            _ = next
                                .filters
                                .entry(alias.clone())
                                .or_default()
                                .insert(index.clone(), f.clone())
                        }
                        None => next.drop_filter(alias, index),
                    }
                }
                AliasAction::Remove { index, alias, must_exist } => {
                    let removed = next.aliases.get_mut(alias).is_some_and(|ix| ix.remove(index).is_some());
                    next.drop_filter(alias, index);
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
        for (alias, ix) in &next.aliases {
            let writers: Vec<&str> =
                ix.iter().filter(|(_, w)| **w == Some(true)).map(|(i, _)| i.as_str()).collect();
            if writers.len() > 1 {
                return Err(Error::InvalidArgument(format!(
                    "alias [{alias}] has more than one write index [{}]",
                    writers.join(",")
                )));
            }
        }
        Ok(next)
    }

    /// These aliases without `index` in any of them (an alias left naming nothing is dropped).
    pub fn without_index(&self, index: &str) -> Aliases {
        let mut next = self.clone();
        drop_index(&mut next.aliases, index);
        drop_index(&mut next.filters, index);
        next
    }

    fn drop_filter(&mut self, alias: &str, index: &str) {
        if let Some(ix) = self.filters.get_mut(alias) {
            ix.remove(index);
            if ix.is_empty() {
                self.filters.remove(alias);
            }
        }
    }
}

/// Takes `index` out of every alias of an alias → index → value map, dropping an alias left with none.
fn drop_index<V>(map: &mut BTreeMap<String, BTreeMap<String, V>>, index: &str) {
    map.retain(|_, ix| {
        ix.remove(index);
        !ix.is_empty()
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(index: &str, alias: &str) -> AliasAction {
        AliasAction::Add { index: index.into(), alias: alias.into(), is_write_index: None, filter: None }
    }

    fn add_w(index: &str, alias: &str, w: bool) -> AliasAction {
        AliasAction::Add { index: index.into(), alias: alias.into(), is_write_index: Some(w), filter: None }
    }

    fn add_f(index: &str, alias: &str, f: serde_json::Value) -> AliasAction {
        AliasAction::Add { index: index.into(), alias: alias.into(), is_write_index: None, filter: Some(f) }
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
        assert_eq!(x.of_index("a"), [("x".to_string(), None), ("y".to_string(), None)]);
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
    fn writes_go_to_the_write_index() {
        let exists = |i: &str| ["a", "b", "c"].contains(&i);
        let one = Aliases::default().applied(&[add("a", "x")], exists).unwrap();
        assert_eq!(one.write_index("x"), Some("a"), "an alias's only index");
        let off = one.applied(&[add_w("a", "x", false)], exists).unwrap();
        assert_eq!(off.write_index("x"), None, "unless it says it is not");
        let two = one.applied(&[add("b", "x")], exists).unwrap();
        assert_eq!(two.write_index("x"), None, "several indices, none marked");
        // Rollover: the new generation becomes the write index as the old one stops being it.
        let rolled = two.applied(&[add_w("a", "x", false), add_w("c", "x", true)], exists).unwrap();
        assert_eq!(rolled.write_index("x"), Some("c"));
        assert_eq!(rolled.of_index("c"), [("x".to_string(), Some(true))]);
        assert!(matches!(rolled.applied(&[add_w("b", "x", true)], exists), Err(Error::InvalidArgument(_))));
        assert_eq!(rolled.write_index("nope"), None);
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
    fn filters_follow_their_alias_and_index() {
        let exists = |i: &str| ["a", "b"].contains(&i);
        let f = serde_json::json!({"term": {"user": "kim"}});
        let x = Aliases::default().applied(&[add_f("a", "x", f.clone()), add("b", "x")], exists).unwrap();
        assert_eq!(x.filter("x", "a"), Some(&f));
        assert_eq!(x.filter("x", "b"), None);
        // Adding again replaces the alias's options there: without a filter, none.
        let plain = x.applied(&[add("a", "x")], exists).unwrap();
        assert_eq!(plain.filter("x", "a"), None);
        assert_eq!(
            plain.applied(&[add("b", "x")], exists).unwrap(),
            Aliases::default().applied(&[add("a", "x"), add("b", "x")], exists).unwrap()
        );
        // Removing the alias from the index, or deleting the index, drops its filter.
        let removed = x.applied(&[remove("a", "x", true), add("a", "x")], exists).unwrap();
        assert_eq!(removed.filter("x", "a"), None);
        let gone = x.without_index("a");
        assert_eq!(gone.filter("x", "a"), None);
        assert_eq!(gone, Aliases::default().applied(&[add("b", "x")], exists).unwrap());
        // Stored with the aliases; a file from before filters loads without any.
        let dir = tempfile::tempdir().unwrap();
        x.store(dir.path()).unwrap();
        assert_eq!(Aliases::load(dir.path()).unwrap(), x);
        std::fs::write(dir.path().join(ALIASES_FILE), br#"{"aliases":{"x":{"a":null}}}"#).unwrap();
        assert_eq!(
            Aliases::load(dir.path()).unwrap(),
            Aliases::default().applied(&[add("a", "x")], exists).unwrap()
        );
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
