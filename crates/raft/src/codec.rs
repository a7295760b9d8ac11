//! The one binary codec: bincode 2 through serde, standard configuration.
//!
//! Used for the log store's records and for every peer RPC body, so the
//! encoding of a type is the same on disk and on the wire.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest body [`decode`] accepts, a guard against absurd length prefixes.
pub const MAX_DECODE_BYTES: usize = 64 * 1024 * 1024;

/// An encoding or decoding failure.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The value could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    /// The bytes are not a valid encoding of the expected type.
    #[error("decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// A valid value was followed by unread bytes.
    #[error("decode: {0} trailing bytes")]
    TrailingBytes(usize),
}

impl From<CodecError> for std::io::Error {
    fn from(e: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_DECODE_BYTES>()
}

/// Encodes `value`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

/// Decodes a `T` that must fill `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())?;
    if read != bytes.len() {
        return Err(CodecError::TrailingBytes(bytes.len() - read));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let v: (u64, String, Option<Vec<u8>>) = (7, "x".into(), Some(vec![1, 2, 3]));
        let bytes = encode(&v).unwrap();
        assert_eq!(decode::<(u64, String, Option<Vec<u8>>)>(&bytes).unwrap(), v);

        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode::<(u64, String, Option<Vec<u8>>)>(&longer),
            Err(CodecError::TrailingBytes(1))
        ));
        assert!(decode::<(u64, String, Option<Vec<u8>>)>(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode::<String>(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
