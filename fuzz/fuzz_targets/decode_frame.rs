//! Frame decoding never panics, whatever the bytes and however they are
//! cut: every frame it reads writes back to the same frame, it keeps no
//! more than it was fed, and after a fatal error it reads nothing more.
#![no_main]

use leasehold_api::wire::{
    encode_frame, read_preamble, sniff, Answer, FrameDecoder, Message, Request,
};
use libfuzzer_sys::fuzz_target;

/// Feeds `bytes` in pieces of `piece` bytes, polling each piece dry.
fn decode<M: Message + PartialEq + std::fmt::Debug>(bytes: &[u8], piece: usize) {
    let mut decoder = FrameDecoder::<M>::new();
    let mut fatal = false;
    for chunk in bytes.chunks(piece) {
        decoder.feed(chunk);
        loop {
            match decoder.poll() {
                Ok(Some(frame)) => {
                    assert!(!fatal, "a frame after a fatal error");
                    let mut again = Vec::new();
                    encode_frame(frame.id, &frame.message, &mut again).unwrap();
                    let mut check = FrameDecoder::<M>::new();
                    check.feed(&again);
                    assert_eq!(check.poll().unwrap(), Some(frame));
                    check.finish().unwrap();
                }
                Ok(None) => break,
                Err(e) if e.is_fatal() => {
                    fatal = true;
                    assert_eq!(decoder.buffered(), 0);
                    break;
                }
                Err(_) => {}
            }
        }
        assert!(decoder.buffered() <= bytes.len());
    }
    let _ = decoder.finish();
}

fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let piece = usize::from(piece).max(1);
    let _ = (sniff(bytes), read_preamble(bytes));
    decode::<Request>(bytes, piece);
    decode::<Answer>(bytes, piece);
});
