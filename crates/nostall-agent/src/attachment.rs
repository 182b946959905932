//! Bytes too large for a message, sent beside it in a memfd: a job's tokenizers (each
//! `tokenizer.json` is megabytes; a message holds [`MAX_MESSAGE`](crate::socket::MAX_MESSAGE)).
//!
//! The job writes the pieces one after another into a fresh memfd and sends its
//! descriptor with the hello; the message says each piece's length. The agent reads them
//! at their offsets (never through the file's shared position), after checking that the
//! file holds exactly as many bytes as the message says and no more than its bound: a
//! descriptor of anything else (a pipe, a socket, a larger file) is refused, not read.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A memfd holding `pieces` one after another.
pub(crate) fn write(pieces: &[Arc<[u8]>]) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated name; the flag is valid for memfd_create.
    let raw = unsafe { libc::memfd_create(c"nostall-attachment".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned to us, owned by nothing else.
    let mut file = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    for piece in pieces {
        file.write_all(piece)?;
    }
    Ok(file.into())
}

/// The tokenizers a hello names by their lengths (`lens`), from the descriptor that came
/// with it: one comes only to carry them.
pub(crate) fn received(fd: Option<OwnedFd>, lens: &[u64]) -> Result<Vec<Arc<[u8]>>, String> {
    match (fd, lens.is_empty()) {
        (None, true) => Ok(Vec::new()),
        (Some(fd), false) => read(fd, lens),
        (Some(_), true) => Err("a descriptor came with the hello".into()),
        (None, false) => Err("the hello names tokenizers but sent none".into()),
    }
}

/// The pieces of `lens` bytes from `fd`, which must hold exactly their sum of bytes.
pub(crate) fn read(fd: OwnedFd, lens: &[u64]) -> Result<Vec<Arc<[u8]>>, String> {
    let file = File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| format!("the tokenizers' descriptor cannot be read: {e}"))?;
    let total = lens.iter().try_fold(0u64, |t, &n| t.checked_add(n));
    if !meta.is_file() || Some(meta.len()) != total {
        return Err(format!(
            "the tokenizers' descriptor is not a file of the {} bytes the hello says",
            total.map_or_else(|| "overflowing".into(), |t| t.to_string())
        ));
    }
    let mut at = 0u64;
    lens.iter()
        .map(|&len| {
            let mut piece = vec![0u8; len as usize];
            file.read_exact_at(&mut piece, at)
                .map_err(|e| format!("the tokenizers' descriptor cannot be read: {e}"))?;
            at += len;
            Ok(piece.into())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_read_back_only_from_a_file_of_their_length() {
        let pieces: Vec<Arc<[u8]>> = vec![b"first".as_slice().into(), b"second!".as_slice().into()];
        let fd = write(&pieces).unwrap();
        assert_eq!(read(fd.try_clone().unwrap(), &[5, 7]).unwrap(), pieces);
        let why = read(fd.try_clone().unwrap(), &[5, 8]).unwrap_err();
        assert!(why.contains("not a file of the 13 bytes"), "{why}");
        let why = read(fd, &[u64::MAX, 2]).unwrap_err();
        assert!(why.contains("overflowing"), "{why}");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let why = read(a.into(), &[]).unwrap_err();
        assert!(why.contains("not a file"), "{why}");
    }
}
