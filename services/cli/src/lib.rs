//! The client half of the `orbit` binary: everything that talks to a running server as a
//! client, and `orbit test`, which runs a definition in the simulator. Nothing here runs a
//! server; the `orbit` package (`services/orbit`) parses the command line and hands
//! [`client::ClientCommand`] and [`testing::TestArgs`] to [`client::run`] and
//! [`testing::run`].
//!
//! The pieces: [`client`] (`workflow`, `execution`, `worker`, `cluster`, `replay`,
//! `schedule`, `token`), [`testing`] (`orbit test`), and [`flags`], the flags the servers
//! share with the client (the TLS of outgoing connections, the duration syntax).

pub mod client;
pub mod flags;
pub mod testing;
