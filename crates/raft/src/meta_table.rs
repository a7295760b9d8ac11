//! The `meta` table of the store's redb file (one record per key, each
//! encoded with [`crate::codec`]), shared by the log store's records and
//! the identity's.

use std::io;

use redb::ReadableTable;
use redb::TableDefinition;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;

/// The table of single records, by key.
pub(crate) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

pub(crate) fn io_err(e: impl Into<redb::Error>) -> io::Error {
    io::Error::other(e.into())
}

/// The record under `key`, if there is one.
pub(crate) fn get_meta<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> io::Result<Option<T>> {
    match table.get(key).map_err(io_err)? {
        Some(v) => Ok(Some(codec::decode(v.value())?)),
        None => Ok(None),
    }
}

/// Writes `value` as the record under `key`.
pub(crate) fn put_meta<T: Serialize>(
    table: &mut redb::Table<&'static str, &'static [u8]>,
    key: &str,
    value: &T,
) -> io::Result<()> {
    let bytes = codec::encode(value)?;
    table.insert(key, bytes.as_slice()).map_err(io_err)?;
    Ok(())
}
