//! Compiles `proto/` into Rust with a pure-Rust protobuf parser (protox: no system
//! `protoc`), generates tonic clients and servers, and writes the encoded file descriptor
//! set (with imports and source comments) to `OUT_DIR/orbit_descriptor.bin` for server
//! reflection.
#![allow(clippy::disallowed_methods)] // Cargo talks to a build script through its environment.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

use protox::prost::Message as _;

/// The include root: proto files are named relative to it (`orbit/v1/common.proto`), as
/// in `buf.yaml`'s module path.
const PROTO_ROOT: &str = "proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");

    let mut files = Vec::new();
    collect_protos(Path::new(PROTO_ROOT), &mut files)?;
    let files: Vec<PathBuf> = files
        .into_iter()
        .map(|path| path.strip_prefix(PROTO_ROOT).map(Path::to_path_buf))
        .collect::<Result<_, _>>()?;

    // Well-known types (google/protobuf/*.proto) are built into protox, and included in
    // the set as imports so reflection clients can resolve every type.
    let fds = protox::compile(&files, [PROTO_ROOT])?;

    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    fs::write(out_dir.join("orbit_descriptor.bin"), fds.encode_to_vec())?;

    // google.protobuf types map to prost-types; prost-build still needs their descriptors
    // in the set to decide which traits the generated messages can derive.
    // `codec_path`: prost's codec, except that a message that does not decode is the
    // sender's INVALID_ARGUMENT rather than INTERNAL (see src/codec.rs).
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::OrbitCodec")
        .compile_fds(fds)?;
    Ok(())
}

/// Appends every `.proto` file under `dir` to `out`, in a stable (sorted) order.
fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Box<dyn Error>> {
    let mut entries =
        fs::read_dir(dir)?.map(|entry| entry.map(|e| e.path())).collect::<Result<Vec<_>, _>>()?;
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
