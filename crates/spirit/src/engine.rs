//! The engine: one data directory holding named indexes (`DIR/indexes/NAME/`).

use crate::config::ShardConfig;
use crate::error::{Error, Result};
use crate::index::{Index, IndexSettings};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Engine-wide configuration: the budgets and durability every index opens with.
#[derive(Debug, Clone, Default)]
pub struct EngineConfig {
    pub shard: ShardConfig,
}

pub struct Engine {
    dir: PathBuf,
    config: EngineConfig,
    indexes: Mutex<BTreeMap<String, Arc<Index>>>,
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
        let engine = Engine { dir, config, indexes: Mutex::new(BTreeMap::new()) };
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
            let index = Index::open(&n, &idx_dir.join(&n), engine.config.shard.clone(), None, None)?;
            engine.indexes.lock().insert(n, Arc::new(index));
        }
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

    /// Creates an index; an error if it exists.
    pub fn create_index(
        &self,
        name: &str,
        mappings: Option<&serde_json::Value>,
        settings: Option<IndexSettings>,
    ) -> Result<Arc<Index>> {
        validate_index_name(name)?;
        let mut map = self.indexes.lock();
        if map.contains_key(name) {
            return Err(Error::InvalidArgument(format!("index [{name}] already exists")));
        }
        let dir = self.dir.join("indexes").join(name);
        let index = Arc::new(Index::open(name, &dir, self.config.shard.clone(), mappings, settings)?);
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

    /// Closes and deletes an index with all its data.
    pub fn delete_index(&self, name: &str) -> Result<()> {
        let index = self
            .indexes
            .lock()
            .remove(name)
            .ok_or_else(|| Error::NotFound(format!("no such index [{name}]")))?;
        index.close()?;
        drop(index);
        let dir = self.dir.join("indexes").join(name);
        std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))
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
