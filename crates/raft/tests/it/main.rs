//! The Raft layer's integration tests, one binary: storage, codec,
//! transport and a three-node cluster over loopback, a module each.

mod cluster;
mod codec;
mod framed;
mod storage;
mod transport;
