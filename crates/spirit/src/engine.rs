//! The engine: one data directory holding named indexes (`DIR/indexes/NAME/`).
//!
//! Every index opens with the engine's [`EngineConfig`] unless it was created with [`IndexOptions`]: those
//! are fixed at creation (like an Elasticsearch index's `index.translog.durability`) and stored beside the
//! index in `index.json`, so a server started with other defaults never reopens a crash-safe index as
//! volatile (which would discard its heap).

use crate::aliases::{AliasAction, Aliases};
use crate::config::{Durability, ShardConfig};
use crate::error::{Error, Result};
use crate::index::{Index, IndexSettings};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Engine-wide configuration: the budgets and durability every index opens with.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    /// Budgets and policies of one index (split evenly between its shards).
    pub shard: ShardConfig,
    /// Shards of a new index created without an explicit count (`None`: 1). The CLI and the server default
    /// to the core count ([`default_shards`]).
    pub default_shards: Option<usize>,
}

/// The shard count for new indexes the CLI and server use by default: one per core, at most 8.
pub fn default_shards() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8)
}

/// Settings of one index that override the engine's defaults; fixed when the index is created.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IndexOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_budget: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_budget: Option<u64>,
    /// Shards (fixed at creation; the directory layout records it too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<usize>,
}

/// The file, in an index directory, holding its [`IndexOptions`].
pub const OPTIONS_FILE: &str = "index.json";

impl IndexOptions {
    fn apply(&self, mut cfg: ShardConfig) -> Result<ShardConfig> {
        if let Some(d) = self.durability {
            cfg.durability = d;
        }
        if let Some(b) = self.dram_budget {
            cfg.dram_budget = b;
        }
        if let Some(b) = self.persistent_budget {
            cfg.persistent_budget = b;
        }
        cfg.validate().map_err(Error::InvalidArgument)?;
        Ok(cfg)
    }

    fn load(dir: &Path) -> Result<IndexOptions> {
        load_json(dir, OPTIONS_FILE)
    }

    /// Writes the options durably ([`store_json`]).
    fn store(&self, dir: &Path) -> Result<()> {
        store_json(dir, OPTIONS_FILE, self)
    }
}

/// The JSON file `name` in `dir`, or the default value when there is none.
pub(crate) fn load_json<T: serde::de::DeserializeOwned + Default>(dir: &Path, name: &str) -> Result<T> {
    let path = dir.join(name);
    match std::fs::read(&path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes).map_err(|e| Error::Format(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Replaces the JSON file `name` in `dir` with `value`, durably: a temporary file, fsync, rename, fsync of the
/// directory — a crash leaves the old file or the new one, whole.
pub(crate) fn store_json<T: serde::Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    use std::io::Write;
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(&serde_json::to_vec_pretty(value).expect("JSON serializes"))
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, e))
}

pub struct Engine {
    dir: PathBuf,
    config: EngineConfig,
    indexes: Mutex<BTreeMap<String, Arc<Index>>>,
    /// Index aliases ([`crate::aliases`]). Lock order: `indexes` first when both are taken.
    aliases: Mutex<Aliases>,
}

/// Index names follow Elasticsearch's rules: lowercase, no path characters.
pub fn validate_index_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with(['_', '-', '+', '.'])
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.+".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "invalid index name [{name}]: use lowercase letters, digits, '_', '-', '.', '+', not starting with _ - + ."
        )))
    }
}

impl Engine {
    /// Opens the data directory, opening every index in it.
    pub fn open(dir: impl AsRef<Path>, config: EngineConfig) -> Result<Engine> {
        let dir = dir.as_ref().to_path_buf();
        let idx_dir = dir.join("indexes");
        std::fs::create_dir_all(&idx_dir).map_err(|e| Error::io(&idx_dir, e))?;
        let aliases = Aliases::load(&dir)?;
        let engine =
            Engine { dir, config, indexes: Mutex::new(BTreeMap::new()), aliases: Mutex::new(aliases) };
        let mut names = vec![];
        for entry in std::fs::read_dir(&idx_dir).map_err(|e| Error::io(&idx_dir, e))? {
            let entry = entry.map_err(|e| Error::io(&idx_dir, e))?;
            if entry.path().is_dir() {
                if let Some(n) = entry.file_name().to_str() {
                    names.push(n.to_string());
                }
            }
        }
        for n in names {
            let dir = idx_dir.join(&n);
            let cfg = IndexOptions::load(&dir)?.apply(engine.config.shard.clone())?;
            let index = Index::open(&n, &dir, cfg, None, None)?;
            engine.indexes.lock().insert(n, Arc::new(index));
        }
        // An index removed behind the engine's back (its directory deleted) leaves its aliases.
        let names = engine.index_names();
        let mut aliases = engine.aliases.lock();
        let gone: Vec<String> =
            aliases.iter().flat_map(|(_, ix)| ix).filter(|i| !names.contains(i)).cloned().collect();
        let pruned = gone.iter().fold(aliases.clone(), |a, i| a.without_index(i));
        if pruned != *aliases {
            pruned.store(&engine.dir)?;
            *aliases = pruned;
        }
        drop(aliases);
        Ok(engine)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn index(&self, name: &str) -> Option<Arc<Index>> {
        self.indexes.lock().get(name).cloned()
    }

    pub fn index_names(&self) -> Vec<String> {
        self.indexes.lock().keys().cloned().collect()
    }

    /// The engine-wide defaults.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Creates an index; an error if it exists.
    pub fn create_index(
        &self,
        name: &str,
        mappings: Option<&serde_json::Value>,
        settings: Option<IndexSettings>,
    ) -> Result<Arc<Index>> {
        self.create_index_with(name, mappings, settings, &IndexOptions::default())
    }

    /// Creates an index whose `options` override the engine's defaults for good (stored beside it).
    pub fn create_index_with(
        &self,
        name: &str,
        mappings: Option<&serde_json::Value>,
        settings: Option<IndexSettings>,
        options: &IndexOptions,
    ) -> Result<Arc<Index>> {
        validate_index_name(name)?;
        if let Some(s) = &settings {
            s.validate()?;
        }
        let mut map = self.indexes.lock();
        if map.contains_key(name) {
            return Err(Error::AlreadyExists(format!("index [{name}] already exists")));
        }
        if self.aliases.lock().get(name).is_some() {
            return Err(Error::InvalidArgument(format!(
                "invalid index name [{name}]: an alias with the same name exists"
            )));
        }
        let cfg = options.apply(self.config.shard.clone())?;
        let dir = self.dir.join("indexes").join(name);
        // The durability is always stored: a later start with other defaults must not change it.
        let mut options = options.clone();
        options.durability.get_or_insert(cfg.durability);
        let shards = *options.shards.get_or_insert(
            settings.as_ref().map_or(self.config.default_shards.unwrap_or(1), |s| s.number_of_shards),
        );
        let settings = Some(IndexSettings { number_of_shards: shards, ..settings.unwrap_or_default() });
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        options.store(&dir)?;
        let index = match Index::open(name, &dir, cfg, mappings, settings) {
            Ok(i) => Arc::new(i),
            Err(e) => {
                // Leave no half-created index behind (it would be opened at the next start).
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        map.insert(name.to_string(), index.clone());
        Ok(index)
    }

    /// The index `name`, created with default settings if absent.
    pub fn index_or_create(&self, name: &str) -> Result<Arc<Index>> {
        if let Some(i) = self.index(name) {
            return Ok(i);
        }
        self.create_index(name, None, None)
    }

    /// The options the index `name` was created with.
    pub fn index_options(&self, name: &str) -> Result<IndexOptions> {
        IndexOptions::load(&self.dir.join("indexes").join(name))
    }

    /// Closes and deletes an index with all its data.
    pub fn delete_index(&self, name: &str) -> Result<()> {
        let index = self
            .indexes
            .lock()
            .remove(name)
            .ok_or_else(|| Error::NotFound(format!("no such index [{name}]")))?;
        {
            let mut aliases = self.aliases.lock();
            let next = aliases.without_index(name);
            if next != *aliases {
                next.store(&self.dir)?;
                *aliases = next;
            }
        }
        // Deleted, not closed: nothing of it needs to reach the disk first.
        index.discard();
        drop(index);
        let dir = self.dir.join("indexes").join(name);
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))
    }

    /// Applies alias `actions` atomically: all of them or, on the first that fails, none (see
    /// [`Aliases::applied`]); the new set is durable when this returns.
    pub fn update_aliases(&self, actions: &[AliasAction]) -> Result<()> {
        let indexes = self.indexes.lock();
        let mut aliases = self.aliases.lock();
        let next = aliases.applied(actions, |i| indexes.contains_key(i))?;
        if next != *aliases {
            next.store(&self.dir)?;
            *aliases = next;
        }
        Ok(())
    }

    /// Every alias of the engine, with the indices each names.
    pub fn aliases(&self) -> Aliases {
        self.aliases.lock().clone()
    }

    /// Closes every index (gracefully persisting them in graceful mode).
    pub fn close(&self) -> Result<()> {
        let mut first_err = None;
        for (_, idx) in self.indexes.lock().iter() {
            if let Err(e) = idx.close() {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
