//! One client's connection of the binary transport (docs/design.md, "The
//! binary transport: frames"), driven with the wire codec: one call at a
//! time, as every other system's session makes them, so the figure is the
//! transport's and the node's, not a client's pipelining.

use leasehold_api::wire::{self, encode_frame, Answer, FrameDecoder, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a call failed.
type Failure = String;

/// A connection to a node, the preambles exchanged.
pub struct FrameConn {
    stream: TcpStream,
    answers: FrameDecoder<Answer>,
    out: Vec<u8>,
    buffer: Vec<u8>,
    next_id: u64,
}

impl FrameConn {
    /// Connects to `addr` (`host:port`) and agrees a version.
    pub async fn open(addr: &str) -> Result<FrameConn, Failure> {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .write_all(&wire::preamble(wire::SPEAKS))
            .await
            .map_err(|e| e.to_string())?;
        let mut chosen = [0u8; wire::PREAMBLE_LEN];
        stream
            .read_exact(&mut chosen)
            .await
            .map_err(|e| format!("no preamble: {e}"))?;
        let chosen = wire::read_preamble(&chosen)
            .map_err(|e| e.to_string())?
            .ok_or("a short preamble")?;
        wire::accept(wire::SPEAKS, chosen).map_err(|e| e.to_string())?;
        Ok(FrameConn {
            stream,
            answers: FrameDecoder::new(),
            out: Vec::with_capacity(256),
            buffer: vec![0; 16 << 10],
            next_id: 1,
        })
    }

    /// Sends `request` and waits for its answer.
    pub async fn call(&mut self, request: &Request) -> Result<Answer, Failure> {
        let id = self.next_id;
        self.next_id += 1;
        self.out.clear();
        encode_frame(id, request, &mut self.out).map_err(|e| e.to_string())?;
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| e.to_string())?;
        loop {
            if let Some(frame) = self.answers.poll().map_err(|e| e.to_string())? {
                if frame.id == id {
                    return Ok(frame.message);
                }
                continue;
            }
            let n = self
                .stream
                .read(&mut self.buffer)
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the node closed the connection".into());
            }
            self.answers.feed(&self.buffer[..n]);
        }
    }
}
