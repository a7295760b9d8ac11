//! The durable Raft log and vote store, on redb.
//!
//! One redb file, `raft.redb`, in the data directory, with two tables:
//! `meta` (node id, vote, committed log id, last purged log id) and `log`
//! (index → encoded entry). Every write goes through one writer thread, in
//! the order it was submitted, and commits with redb's default
//! `Durability::Immediate` (fsync) before the caller is answered: a vote is
//! durable when `save_vote` returns and appended entries are durable before
//! their callback fires.

use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::Path;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::LogState;
use openraft::OptionalSend;
use openraft::RaftLogReader;
use redb::Database;
use redb::ReadableDatabase;
use redb::ReadableTable;
use redb::TableDefinition;
use serde::de::DeserializeOwned;

use crate::blocking;
use crate::codec;
use crate::entropy;
use crate::identity::Identity;
use crate::identity::Recorded;
use crate::identity::StoreId;
use crate::meta_table::{get_meta, io_err, put_meta, META};
use crate::types::Entry;
use crate::types::LogId;
use crate::types::NodeId;
use crate::types::TypeConfig;
use crate::types::Vote;

/// The file, inside the data directory, that holds the store.
pub const DB_FILE: &str = "raft.redb";

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");

const KEY_NODE_ID: &str = "node_id";
const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";
const KEY_STORE_ID: &str = "store_id";

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A filesystem error (e.g. creating the directory).
    #[error("raft store {path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// redb refused (including: another process has the store open).
    #[error("raft store {path}: {source}")]
    Db {
        /// The database file.
        path: PathBuf,
        /// The error.
        source: redb::Error,
    },
    /// A stored record did not decode.
    #[error("raft store {path}: {source}")]
    Codec {
        /// The database file.
        path: PathBuf,
        /// The error.
        source: codec::CodecError,
    },
    /// The data directory belongs to another node.
    #[error("data dir {path} belongs to node {stored}, not node {given}")]
    NodeIdMismatch {
        /// The data directory.
        path: PathBuf,
        /// The node id recorded in it.
        stored: NodeId,
        /// The node id this process was started with.
        given: NodeId,
    },
}

/// Runs redb write transactions on one thread, in submission order.
struct Writer {
    db: Arc<Database>,
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

type Job = Box<dyn FnOnce(&Database) + Send>;

impl Writer {
    fn spawn(db: Arc<Database>) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let on_thread = Arc::clone(&db);
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || {
                for job in rx {
                    job(&on_thread);
                }
            })?;
        Ok(Self {
            db,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `f` in one write transaction, committed before the answer;
    /// runs it at once where blocking work runs inline
    /// ([`crate::blocking`]).
    async fn write<R, F>(&self, f: F) -> io::Result<R>
    where
        R: Send + 'static,
        F: FnOnce(&redb::WriteTransaction) -> io::Result<R> + Send + 'static,
    {
        let transaction = move |db: &Database| {
            let txn = db.begin_write().map_err(io_err)?;
            let r = f(&txn)?;
            txn.commit().map_err(io_err)?;
            Ok(r)
        };
        if blocking::inline() {
            return transaction(&self.db);
        }
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |db: &Database| {
            let _ = done_tx.send(transaction(db));
        });
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| io::Error::other("raft log writer stopped"))?;
        tx.send(job)
            .map_err(|_| io::Error::other("raft log writer stopped"))?;
        done_rx
            .await
            .map_err(|_| io::Error::other("raft log writer stopped"))?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the thread once queued writes are done.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The durable Raft log storage of one node.
pub struct LogStore {
    db: Arc<Database>,
    writer: Writer,
    node_id: NodeId,
    path: PathBuf,
    store_id: StoreId,
    recorded: Recorded,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("node_id", &self.node_id)
            .field("path", &self.path)
            .finish()
    }
}

impl LogStore {
    /// Opens (creating if needed) the store in `dir` for node `node_id`.
    ///
    /// The first open records `node_id` in the store; a later open with a
    /// different id fails with [`StoreError::NodeIdMismatch`], so a data
    /// directory keeps the identity it was created with.
    pub fn open(dir: &Path, node_id: NodeId) -> Result<Self, StoreError> {
        Self::open_named(dir, node_id, StoreId(entropy::random_u128()))
    }

    /// As [`LogStore::open`], naming a store it creates `fresh`: drawn by
    /// the caller, so on the caller's thread (a seeded one, under a
    /// simulator) rather than the blocking task's that opens the store.
    pub(crate) fn open_named(
        dir: &Path,
        node_id: NodeId,
        fresh: StoreId,
    ) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(DB_FILE);
        let db_err = |e: redb::Error| StoreError::Db {
            path: path.clone(),
            source: e,
        };
        let db = Database::create(&path).map_err(|e| db_err(e.into()))?;

        let txn = db.begin_write().map_err(|e| db_err(e.into()))?;
        let (stored, store_id, recorded) = {
            let mut meta = txn.open_table(META).map_err(|e| db_err(e.into()))?;
            txn.open_table(LOG).map_err(|e| db_err(e.into()))?;
            let to_store = |e| io_to_store(&path, e);
            let stored: Option<NodeId> = get_meta(&meta, KEY_NODE_ID).map_err(to_store)?;
            let store_id: Option<StoreId> = get_meta(&meta, KEY_STORE_ID).map_err(to_store)?;
            let recorded = Recorded::read(&meta).map_err(to_store)?;
            let recorded = if stored.is_none() {
                put_meta(&mut meta, KEY_NODE_ID, &node_id).map_err(|e| io_to_store(&path, e))?;
                recorded
                    .created(&mut meta)
                    .map_err(|e| io_to_store(&path, e))?
            } else {
                recorded
            };
            let store_id = match store_id {
                Some(id) => id,
                None => {
                    put_meta(&mut meta, KEY_STORE_ID, &fresh).map_err(|e| io_to_store(&path, e))?;
                    fresh
                }
            };
            (stored, store_id, recorded)
        };
        match stored {
            Some(stored) if stored != node_id => {
                return Err(StoreError::NodeIdMismatch {
                    path: dir.to_path_buf(),
                    stored,
                    given: node_id,
                });
            }
            _ => {}
        }
        txn.commit().map_err(|e| db_err(e.into()))?;
        // A new file (or directory) exists after a power loss only once the
        // directory that names it (and its parent) is synced: without this, a node could come
        // back as a first start, having forgotten its vote. Synced at every
        // open, not only the first: a crash between the first commit and
        // the sync would otherwise leave it unsynced for good.
        sync_dir(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent).map_err(|source| StoreError::Io {
                path: parent.to_path_buf(),
                source,
            })?;
        }

        let db = Arc::new(db);
        let writer = Writer::spawn(db.clone()).map_err(|source| StoreError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            db,
            writer,
            node_id,
            path,
            store_id,
            recorded,
        })
    }

    /// This data directory's identity and what it recorded of the cluster,
    /// writing what it learns back here while the store is open.
    pub fn identity(&self) -> Identity {
        Identity::new(
            self.node_id,
            self.store_id,
            self.recorded.clone(),
            Arc::downgrade(&self.db),
        )
    }

    /// A handle that tells when every user of this store has let it go.
    pub fn closed(&self) -> StoreClosed {
        StoreClosed {
            db: Arc::downgrade(&self.db),
            path: self.path.clone(),
        }
    }

    /// The node id recorded in the store in `dir`, if there is a store there.
    ///
    /// Fails if another process has the store open.
    pub fn read_node_id(dir: &Path) -> Result<Option<NodeId>, StoreError> {
        let path = dir.join(DB_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let db_err = |e: redb::Error| StoreError::Db {
            path: path.clone(),
            source: e,
        };
        let db = Database::open(&path).map_err(|e| db_err(e.into()))?;
        let txn = db.begin_read().map_err(|e| db_err(e.into()))?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(db_err(e.into())),
        };
        get_meta(&meta, KEY_NODE_ID).map_err(|e| io_to_store(&path, e))
    }

    /// The node id this store belongs to.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// The path of the redb file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn reader(&self) -> LogReader {
        LogReader {
            db: self.db.clone(),
        }
    }
}

fn io_to_store(path: &Path, e: io::Error) -> StoreError {
    match e.downcast::<codec::CodecError>() {
        Ok(source) => StoreError::Codec {
            path: path.to_path_buf(),
            source,
        },
        Err(e) => match e.downcast::<redb::Error>() {
            Ok(source) => StoreError::Db {
                path: path.to_path_buf(),
                source,
            },
            Err(source) => StoreError::Io {
                path: path.to_path_buf(),
                source,
            },
        },
    }
}

/// Says when a store's database is closed: every handle to it (the Raft
/// core's, its replication tasks' readers and their read transactions)
/// dropped, so the data directory can be opened again (by a restart in the
/// same process).
#[derive(Debug, Clone)]
pub struct StoreClosed {
    db: std::sync::Weak<Database>,
    path: PathBuf,
}

impl StoreClosed {
    /// Waits up to `patience` for the database to close; answers whether it did.
    pub async fn wait(&self, patience: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            if self.db.strong_count() == 0 {
                // A read transaction still under way keeps the file open a
                // little after the last handle drops: try it.
                let path = self.path.clone();
                let free = blocking::unblock(move || {
                    !matches!(
                        Database::open(&path),
                        Err(redb::DatabaseError::DatabaseAlreadyOpen)
                    )
                })
                .await
                .unwrap_or(true);
                if free {
                    return true;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// Makes a directory's entries durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// A read-only view of the store, shared by replication and the state machine worker.
#[derive(Clone)]
pub struct LogReader {
    db: Arc<Database>,
}

impl Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader").finish_non_exhaustive()
    }
}

impl LogReader {
    fn read_meta<T: DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let txn = self.db.begin_read().map_err(io_err)?;
        let meta = txn.open_table(META).map_err(io_err)?;
        get_meta(&meta, key)
    }

    fn entries<RB: RangeBounds<u64>>(&self, range: RB) -> io::Result<Vec<Entry>> {
        let txn = self.db.begin_read().map_err(io_err)?;
        let log = txn.open_table(LOG).map_err(io_err)?;
        let mut out = Vec::new();
        for item in log.range::<u64>(range).map_err(io_err)? {
            let (_, v) = item.map_err(io_err)?;
            out.push(codec::decode(v.value())?);
        }
        Ok(out)
    }

    fn log_state(&self) -> io::Result<LogState<TypeConfig>> {
        let txn = self.db.begin_read().map_err(io_err)?;
        let meta = txn.open_table(META).map_err(io_err)?;
        let log = txn.open_table(LOG).map_err(io_err)?;
        let last_purged_log_id: Option<LogId> = get_meta(&meta, KEY_LAST_PURGED)?;
        let last_log_id = match log.last().map_err(io_err)? {
            Some((_, v)) => Some(codec::decode::<Entry>(v.value())?.log_id()),
            None => last_purged_log_id,
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.entries(range)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.read_meta(KEY_VOTE)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.reader().entries(range)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.reader().read_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        self.reader().log_state()
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let bytes = codec::encode(vote)?;
        self.writer
            .write(move |txn| {
                let mut meta = txn.open_table(META).map_err(io_err)?;
                meta.insert(KEY_VOTE, bytes.as_slice()).map_err(io_err)?;
                Ok(())
            })
            .await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let bytes = committed.as_ref().map(codec::encode).transpose()?;
        self.writer
            .write(move |txn| {
                let mut meta = txn.open_table(META).map_err(io_err)?;
                match bytes {
                    Some(b) => {
                        meta.insert(KEY_COMMITTED, b.as_slice()).map_err(io_err)?;
                    }
                    None => {
                        meta.remove(KEY_COMMITTED).map_err(io_err)?;
                    }
                }
                Ok(())
            })
            .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        self.reader().read_meta(KEY_COMMITTED)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let encoded = entries
            .into_iter()
            .map(|e| Ok((e.index(), codec::encode(&e)?)))
            .collect::<io::Result<Vec<(u64, Vec<u8>)>>>();
        let res = match encoded {
            Ok(encoded) => {
                self.writer
                    .write(move |txn| {
                        let mut log = txn.open_table(LOG).map_err(io_err)?;
                        for (index, bytes) in &encoded {
                            log.insert(*index, bytes.as_slice()).map_err(io_err)?;
                        }
                        Ok(())
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        // Committed (fsynced) and readable before the callback fires.
        match res {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |l| l.index() + 1);
        self.writer
            .write(move |txn| {
                let mut log = txn.open_table(LOG).map_err(io_err)?;
                log.retain_in::<u64, _>(from.., |_, _| false)
                    .map_err(io_err)?;
                Ok(())
            })
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // leasehold never asks for this (SnapshotPolicy::Never), but it is
        // implemented as the trait requires.
        let upto = log_id.index();
        let bytes = codec::encode(&log_id)?;
        self.writer
            .write(move |txn| {
                let mut meta = txn.open_table(META).map_err(io_err)?;
                let prev: Option<LogId> = get_meta(&meta, KEY_LAST_PURGED)?;
                if prev.as_ref().is_none_or(|p| p.index() < upto) {
                    meta.insert(KEY_LAST_PURGED, bytes.as_slice())
                        .map_err(io_err)?;
                }
                let mut log = txn.open_table(LOG).map_err(io_err)?;
                log.retain_in::<u64, _>(..=upto, |_, _| false)
                    .map_err(io_err)?;
                Ok(())
            })
            .await
    }
}
