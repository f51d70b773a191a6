//! The gRPC codec of every generated Orbit client and server: prost's encoding, with one
//! change on decoding.
//!
//! tonic's prost codec answers a message that does not decode (a string field that is not
//! UTF-8, nesting past protobuf's recursion limit, truncated bytes) with `INTERNAL`, as if the
//! server were broken. It is the sender's mistake, so here it is `INVALID_ARGUMENT`, carrying
//! the Orbit code the way every Orbit error does (the `orbit-error-code` metadata key and a
//! `google.rpc.ErrorInfo` detail in the `orbit.dev` domain) and a message saying what did not
//! decode. On a unary call the status is the answer; on a stream it is the item the handler
//! reads, which it ends the stream with.
//!
//! `build.rs` points tonic-prost-build's `codec_path` here.

use std::collections::HashMap;
use std::marker::PhantomData;

use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_prost::{ProstCodec, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt};

/// The metadata key of the Orbit error code (the same as `orbit_server_kit`'s).
pub const ERROR_CODE_METADATA_KEY: &str = "orbit-error-code";

/// prost's codec, decoding errors as `INVALID_ARGUMENT` (see the module docs).
#[derive(Debug, Clone)]
pub struct OrbitCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for OrbitCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for OrbitCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = OrbitDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        OrbitDecoder(PhantomData)
    }
}

/// Decodes `U` with prost; a failure is [`decode_error`].
#[derive(Debug, Clone)]
pub struct OrbitDecoder<U>(PhantomData<U>);

impl<U: prost::Message + Default> Decoder for OrbitDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| decode_error(&e))
    }
}

/// The status for a message that does not decode: `INVALID_ARGUMENT`, Orbit code
/// `INVALID_ARGUMENT`, and prost's description of what failed (with a hint for nesting).
#[must_use]
pub fn decode_error(error: &prost::DecodeError) -> Status {
    let text = error.to_string();
    let hint = if text.contains("recursion limit") {
        format!(
            " (a payload is nested too deep for protobuf; Orbit accepts at most {} levels of \
             arrays and objects)",
            orbit_payload::MAX_DEPTH
        )
    } else {
        String::new()
    };
    let message = format!("the message could not be decoded: {text}{hint}");
    let code = orbit_codes::ErrorCode::InvalidArgument.as_str();
    let details = ErrorDetails::with_error_info(code, "orbit.dev", HashMap::new());
    let mut metadata = MetadataMap::new();
    metadata.insert(ERROR_CODE_METADATA_KEY, MetadataValue::from_static(code));
    Status::with_error_details_and_metadata(Code::InvalidArgument, message, details, metadata)
}
