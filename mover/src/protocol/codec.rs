//! Frame encoding: a length prefix (bounded) around a postcard payload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use tokio_util::codec::{Decoder, Encoder, LengthDelimitedCodec};

use super::{Entry, Frame, ProtocolError, MAX_FRAME_LEN};

/// Bytes that crossed the connection, both directions, length prefixes included.
#[derive(Clone, Debug, Default)]
pub struct WireCounter(Arc<AtomicU64>);

impl WireCounter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Encodes and decodes [`Frame`]s, refusing any frame over [`MAX_FRAME_LEN`].
#[derive(Debug)]
pub struct FrameCodec {
    inner: LengthDelimitedCodec,
    counter: WireCounter,
    /// Frames decoded so far; the first one gets a closer look when it fails.
    decoded: u64,
    /// The entries of an `Entries` frame not handed out yet.
    unpacked: std::collections::VecDeque<Entry>,
}

impl FrameCodec {
    pub fn new(counter: WireCounter) -> FrameCodec {
        let inner = LengthDelimitedCodec::builder()
            .length_field_type::<u32>()
            .max_frame_length(MAX_FRAME_LEN)
            .new_codec();
        FrameCodec {
            inner,
            counter,
            decoded: 0,
            unpacked: Default::default(),
        }
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = ProtocolError;

    /// An `Entries` frame comes out as its entries, one `Entry` frame each.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        if let Some(entry) = self.unpacked.pop_front() {
            return Ok(Some(Frame::Entry(entry)));
        }
        if self.decoded == 0 && looks_like_tls(src) {
            return Err(ProtocolError::PeerSpeaksTls);
        }
        let Some(payload) = self.inner.decode(src).map_err(frame_too_big)? else {
            return Ok(None);
        };
        self.counter.add(payload.len() + 4);
        self.decoded += 1;
        crate::path::take_refused();
        super::pack::take_refused();
        match postcard::from_bytes(&payload) {
            Ok(Frame::Entries(batch)) => {
                self.unpacked = batch.0.into();
                Ok(self.unpacked.pop_front().map(Frame::Entry))
            }
            Ok(frame) => Ok(Some(frame)),
            Err(e) if self.decoded == 1 => Err(first_frame_error(&payload, e)),
            Err(e) => Err(
                match (crate::path::take_refused(), super::pack::take_refused()) {
                    (_, Some(why)) => super::violation(format!("the peer sent {why}")),
                    (Some(path), None) => {
                        super::violation(format!("the peer sent an invalid path ({path})"))
                    }
                    (None, None) => e.into(),
                },
            ),
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(ProtocolError::Closed("in the middle of a frame")),
        }
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = ProtocolError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        let start = dst.len();
        dst.put_u32(0);
        postcard::to_io(&frame, (&mut *dst).writer())?;
        let len = dst.len() - start - 4;
        if len > MAX_FRAME_LEN {
            dst.truncate(start);
            return Err(super::violation(format!(
                "refusing to send a {len}-byte frame"
            )));
        }
        dst[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
        self.counter.add(len + 4);
        Ok(())
    }
}

/// The leading fields of a `Hello`, whose encoding every version keeps.
#[derive(serde::Deserialize)]
struct HelloPrefix {
    magic: [u8; 6],
    version: u16,
    min_version: u16,
}

/// Explains an undecodable first frame: another program, or a mover of
/// another protocol version whose `Hello` has fields this one does not know.
fn first_frame_error(payload: &[u8], e: postcard::Error) -> ProtocolError {
    match postcard::from_bytes::<(u32, HelloPrefix)>(payload) {
        // A mover's Hello of a version this one cannot talk to; else a broken frame.
        Ok((0, p)) => super::check_peer(p.magic, p.version, p.min_version)
            .err()
            .unwrap_or(ProtocolError::Decode(e)),
        _ => ProtocolError::NotMover,
    }
}

/// A TLS record header (handshake or alert, version 3.x) where a first
/// frame's length would be: such a length is far over [`MAX_FRAME_LEN`], so
/// no mover frame is mistaken for it.
fn looks_like_tls(src: &[u8]) -> bool {
    matches!(src, [0x15 | 0x16, 0x03, 0x00..=0x04, ..])
}

fn frame_too_big(e: std::io::Error) -> ProtocolError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        super::violation(format!("frame longer than {MAX_FRAME_LEN} bytes"))
    } else {
        ProtocolError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Hello, SessionOptions, MAGIC};

    #[test]
    fn a_tls_record_first_is_recognised() {
        let mut codec = FrameCodec::new(WireCounter::default());
        // A TLS alert record, as a TLS receiver answers a plain client.
        let mut buf = BytesMut::from(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32][..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::PeerSpeaksTls)
        ));
    }

    #[test]
    fn a_refused_path_is_named() {
        let mut codec = FrameCodec::new(WireCounter::default());
        let mut buf = BytesMut::new();
        codec.encode(Frame::Credit(1), &mut buf).unwrap();
        codec
            .encode(Frame::DirDone(crate::path::RelPath::root()), &mut buf)
            .unwrap();
        // After two good frames (a bad first frame is explained otherwise),
        // a DirDone whose path, the last field, is ".." instead of "".
        let mut evil = BytesMut::new();
        let payload = postcard::to_allocvec(&Frame::DirDone(crate::path::RelPath::root())).unwrap();
        let mut p = payload[..payload.len() - 1].to_vec();
        p.extend([2, b'.', b'.']);
        evil.extend_from_slice(&(p.len() as u32).to_be_bytes());
        evil.extend_from_slice(&p);
        assert!(codec.decode(&mut buf).unwrap().is_some());
        assert!(codec.decode(&mut buf).unwrap().is_some());
        let err = codec.decode(&mut evil).unwrap_err().to_string();
        assert!(err.contains("invalid path (path has a '..'"), "{err}");
    }

    #[test]
    fn round_trip_and_count() {
        let counter = WireCounter::default();
        let mut codec = FrameCodec::new(counter.clone());
        let mut buf = BytesMut::new();
        codec
            .encode(
                Frame::Hello(Hello::new(SessionOptions::default())),
                &mut buf,
            )
            .unwrap();
        codec.encode(Frame::Credit(7), &mut buf).unwrap();
        let sent = counter.get();
        assert_eq!(sent as usize, buf.len());
        assert!(matches!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::Hello(_))
        ));
        assert!(matches!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::Credit(7))
        ));
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert_eq!(counter.get(), 2 * sent);
    }

    #[test]
    fn refuses_oversized_and_garbage_frames() {
        let mut codec = FrameCodec::new(WireCounter::default());
        let mut buf = BytesMut::from(&((MAX_FRAME_LEN as u32 + 1).to_be_bytes())[..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::Violation(_))
        ));
        let mut codec = FrameCodec::new(WireCounter::default());
        let mut buf = BytesMut::new();
        codec.encode(Frame::Credit(1), &mut buf).unwrap();
        buf.extend_from_slice(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
        assert!(codec.decode(&mut buf).unwrap().is_some());
        assert!(matches!(
            codec.decode(&mut buf),
            Err(ProtocolError::Decode(_))
        ));
    }

    #[test]
    fn first_frame_of_a_newer_mover_is_called_incompatible() {
        // Variant 0, magic, version 9, min version 7, then fields this build cannot parse.
        let mut payload = vec![0u8];
        payload.extend_from_slice(&MAGIC);
        payload.extend_from_slice(&[9, 7, 0xff, 0xff, 0xff]);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        buf.extend_from_slice(&payload);
        let err = FrameCodec::new(WireCounter::default())
            .decode(&mut buf)
            .unwrap_err();
        assert!(
            matches!(
                err,
                ProtocolError::Incompatible {
                    peer: 9,
                    peer_min: 7
                }
            ),
            "{err}"
        );

        let mut buf = BytesMut::from(&[0, 0, 0, 4, b'H', b'T', b'T', b'P'][..]);
        let err = FrameCodec::new(WireCounter::default())
            .decode(&mut buf)
            .unwrap_err();
        assert!(matches!(err, ProtocolError::NotMover), "{err}");
    }

    #[test]
    fn packed_entries_come_out_one_by_one() {
        use crate::meta::{Kind, Meta};
        use crate::path::RelPath;
        let entry = |p: &str| Entry {
            path: RelPath::new(p.as_bytes().to_vec()).unwrap(),
            kind: Kind::File,
            meta: Meta::default(),
            checksum: None,
        };
        let mut codec = FrameCodec::new(WireCounter::default());
        let mut buf = BytesMut::new();
        let frames = vec![
            Frame::Entry(entry("a")),
            Frame::Entry(entry("a/b")),
            Frame::Entry(entry("a/c")),
            Frame::ListEnd(Default::default()),
        ];
        for frame in crate::protocol::pack::coalesce(frames) {
            codec.encode(frame, &mut buf).unwrap();
        }
        let mut paths = Vec::new();
        while let Some(frame) = codec.decode_eof(&mut buf).unwrap() {
            paths.push(match frame {
                Frame::Entry(e) => e.path.to_string(),
                other => other.name().to_string(),
            });
        }
        assert_eq!(paths, ["a", "a/b", "a/c", "ListEnd"]);

        // A packed path with "..", after a good first frame, is named.
        let evil = crate::protocol::pack::EntryBatch(vec![entry("a"), entry("b")]);
        let mut payload = postcard::to_allocvec(&Frame::Entries(evil)).unwrap();
        let at = payload.windows(1).rposition(|w| w == b"b").unwrap();
        payload.splice(at..at + 1, *b"..");
        payload[at - 1] = 2;
        let len = payload.len() - 2;
        payload[1] = len as u8;
        let mut buf = BytesMut::new();
        codec.encode(Frame::Credit(1), &mut buf).unwrap();
        buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        buf.extend_from_slice(&payload);
        assert!(codec.decode(&mut buf).unwrap().is_some());
        let err = codec.decode(&mut buf).unwrap_err().to_string();
        assert!(err.contains("entry 1 of an Entries frame"), "{err}");
    }

    #[test]
    fn truncated_stream_is_reported() {
        let mut codec = FrameCodec::new(WireCounter::default());
        let mut buf = BytesMut::from(&[0, 0, 0, 9, 1][..]);
        assert!(matches!(
            codec.decode_eof(&mut buf),
            Err(ProtocolError::Closed(_))
        ));
    }
}
