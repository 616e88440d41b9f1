//! Read-ahead for `tux3 send`: a device wrapper that turns the sender's
//! reads — a snapshot's file data and tree nodes, mostly in ascending
//! block order, since files are laid out as they were written and sent in
//! inode order — into few large device reads, as a kernel's read-ahead
//! does for a file read front to back.
//!
//! A read that starts where the last one ended is sequential: the window
//! read from there doubles (from [`MIN_WINDOW`] up to [`MAX_WINDOW`]
//! blocks), and a thread reads the next window while the sender uses this
//! one. Any other read is served alone and resets the window. A block a
//! snapshot holds never changes while the snapshot exists, so what was
//! read ahead stays true; nothing is written through this device.
//!
//! [`ReadOnce`] keeps the single blocks the send's several opens of the
//! volume each read (superblock, bitmap, log), so they are read once.
//!
//! Calls only the engine's `Device` trait.

use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::JoinHandle;
use tux3::device::{CounterSnapshot, Device, Gather};

/// The methods a read-only wrapper of `self.inner` shares: its geometry
/// and counters are the inner device's, writes are refused (EROFS), a
/// flush has nothing to do.
macro_rules! read_only_over_inner {
    () => {
        fn block_size(&self) -> u32 {
            self.inner.block_size()
        }

        fn block_count(&self) -> u64 {
            self.inner.block_count()
        }

        fn write(&self, _block: u64, _buf: &[u8]) -> std::io::Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::EROFS))
        }

        fn write_gather(&self, _reqs: &[Gather]) -> std::io::Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::EROFS))
        }

        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }

        fn counters(&self) -> CounterSnapshot {
            self.inner.counters()
        }
    };
}

/// Blocks of the first window of a sequential run.
pub const MIN_WINDOW: u64 = 16;
/// Most blocks a window holds (4 MiB of 4 KiB blocks).
pub const MAX_WINDOW: u64 = 1024;

/// Blocks `start..start + len` as read, or the read's error.
struct Window {
    start: u64,
    data: std::io::Result<Vec<u8>>,
}

impl Window {
    fn len(&self, bs: u64) -> u64 {
        self.data.as_ref().map_or(0, |d| d.len() as u64 / bs)
    }
}

struct State {
    /// The window being served.
    cur: Option<Window>,
    /// Where the last read ended (a read starting here is sequential).
    next: u64,
    /// The size of the next window, in blocks.
    size: u64,
    /// The window the reader thread is reading: (start, blocks).
    pending: Option<(u64, u64)>,
}

/// A read-only device that reads ahead on sequential runs.
pub struct ReadAhead {
    inner: Arc<dyn Device>,
    bs: u64,
    state: Mutex<State>,
    ask: Option<Sender<(u64, u64)>>,
    got: Receiver<Window>,
    /// Buffers of windows done with, back to the thread to read into
    /// again (fresh memory is zeroed twice: by the kernel and by us).
    spent: Sender<Vec<u8>>,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    pub fn new(inner: Arc<dyn Device>) -> ReadAhead {
        let (ask, asked) = bounded::<(u64, u64)>(1);
        let (give, got) = bounded::<Window>(1);
        let (spent, reuse) = bounded::<Vec<u8>>(4);
        let reader = inner.clone();
        let bs = u64::from(inner.block_size());
        let thread = std::thread::Builder::new()
            .name("tux3-send-ahead".into())
            .spawn(move || {
                for (start, len) in asked.iter() {
                    let want = (len * bs) as usize;
                    let mut buf = reuse.try_recv().unwrap_or_default();
                    buf.resize(want, 0);
                    let data = reader.read(start, &mut buf).map(|_| buf);
                    if give.send(Window { start, data }).is_err() {
                        return;
                    }
                }
            })
            .ok();
        ReadAhead {
            inner,
            bs,
            state: Mutex::new(State {
                cur: None,
                next: u64::MAX,
                size: MIN_WINDOW,
                pending: None,
            }),
            ask: thread.as_ref().map(|_| ask),
            got,
            spent,
            thread,
        }
    }

    /// Copy blocks `block..` of `buf`'s length out of `w` if it holds them all.
    fn serve(&self, w: &Window, block: u64, buf: &mut [u8]) -> bool {
        let n = buf.len() as u64 / self.bs;
        let Ok(data) = &w.data else { return false };
        if block < w.start || block + n > w.start + w.len(self.bs) {
            return false;
        }
        let at = ((block - w.start) * self.bs) as usize;
        buf.copy_from_slice(&data[at..at + buf.len()]);
        true
    }

    /// Make `w` the window served, giving the last one's buffer back.
    fn replace(&self, st: &mut State, w: Window) {
        if let Some(Window { data: Ok(old), .. }) = st.cur.replace(w) {
            let _ = self.spent.try_send(old);
        }
    }

    /// Ask the thread for the window after `end`, unless it is asked already.
    fn ahead(&self, st: &mut State, end: u64) {
        let Some(ask) = &self.ask else { return };
        if st.pending.is_some() || end >= self.inner.block_count() {
            return;
        }
        let len = st.size.min(self.inner.block_count() - end);
        if ask.send((end, len)).is_ok() {
            st.pending = Some((end, len));
        }
    }
}

impl Device for ReadAhead {
    read_only_over_inner!();

    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let n = buf.len() as u64 / self.bs;
        let mut st = self.state.lock();
        let sequential = block == st.next;
        st.next = block.saturating_add(n);
        if let Some(w) = &st.cur {
            if self.serve(w, block, buf) {
                return Ok(());
            }
        }
        // The window the thread reads, if this read falls in it.
        if let Some((start, len)) = st.pending {
            if sequential && block >= start && block + n <= start + len {
                st.pending = None;
                let w = self
                    .got
                    .recv()
                    .map_err(|_| std::io::Error::other("read-ahead thread ended"))?;
                let end = w.start + w.len(self.bs);
                let served = self.serve(&w, block, buf);
                self.replace(&mut st, w);
                if served {
                    st.size = (st.size * 2).min(MAX_WINDOW);
                    self.ahead(&mut st, end);
                    return Ok(());
                }
            }
        }
        if !sequential {
            st.size = MIN_WINDOW;
            return self.inner.read(block, buf);
        }
        // Sequential, and not read ahead: read a window from here now
        // (a pending read elsewhere is waited out first, then dropped).
        let mut data = Vec::new();
        if st.pending.take().is_some() {
            if let Ok(Window { data: Ok(d), .. }) = self.got.recv() {
                data = d;
            }
        }
        let len = st.size.max(n).min(self.inner.block_count().saturating_sub(block));
        data.resize((len * self.bs) as usize, 0);
        self.inner.read(block, &mut data)?;
        let w = Window {
            start: block,
            data: Ok(data),
        };
        let served = self.serve(&w, block, buf);
        self.replace(&mut st, w);
        st.size = (st.size * 2).min(MAX_WINDOW);
        self.ahead(&mut st, block + len);
        if served {
            Ok(())
        } else {
            self.inner.read(block, buf)
        }
    }
}

/// The blocks a send reads one at a time, kept for the rest of it: the
/// volume is opened more than once (the live volume for its snapshot
/// list, each snapshot sent), and every open reads the superblock, the
/// bitmap and the log again. Kept blocks are what the device held when
/// first read: all the opens see the volume as of one moment, as one open
/// would. Holds at most [`ONCE_MAX`] blocks; reads of several blocks pass
/// through.
pub struct ReadOnce {
    inner: Arc<dyn Device>,
    kept: Mutex<std::collections::HashMap<u64, Vec<u8>>>,
}

/// Most blocks [`ReadOnce`] keeps.
pub const ONCE_MAX: usize = 4096;

impl ReadOnce {
    pub fn new(inner: Arc<dyn Device>) -> ReadOnce {
        ReadOnce {
            inner,
            kept: Mutex::new(std::collections::HashMap::new()),
        }
    }
}

impl Device for ReadOnce {
    read_only_over_inner!();

    fn read(&self, block: u64, buf: &mut [u8]) -> std::io::Result<()> {
        if buf.len() != self.inner.block_size() as usize {
            return self.inner.read(block, buf);
        }
        if let Some(b) = self.kept.lock().get(&block) {
            buf.copy_from_slice(b);
            return Ok(());
        }
        self.inner.read(block, buf)?;
        let mut kept = self.kept.lock();
        if kept.len() < ONCE_MAX {
            kept.insert(block, buf.to_vec());
        }
        Ok(())
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Ending the channel ends the thread once its read is done.
        self.ask = None;
        let (_, dead) = bounded(0);
        self.got = dead;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tux3::device::MemDevice;

    fn device(blocks: u64) -> Arc<dyn Device> {
        let dev = MemDevice::new(4096, blocks);
        for b in 0..blocks {
            dev.write(b, &[b as u8; 4096]).unwrap();
        }
        Arc::new(dev)
    }

    #[test]
    fn every_read_returns_the_device_s_blocks() {
        let dev = device(5000);
        let ra = ReadAhead::new(dev.clone());
        // Sequential runs of mixed sizes, jumps back and forward, the end.
        let mut at = 0u64;
        let mut rng = 7u64;
        for i in 0..3000 {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let n = 1 + (rng >> 60);
            if i % 97 == 0 {
                at = (rng >> 20) % 4000;
            }
            if at + n > 5000 {
                at = 0;
            }
            let mut got = vec![0u8; (n * 4096) as usize];
            ra.read(at, &mut got).unwrap();
            let mut want = vec![0u8; got.len()];
            dev.read(at, &mut want).unwrap();
            assert_eq!(got, want, "blocks {at}+{n}");
            at += n;
        }
    }

    #[test]
    fn a_sequential_run_is_read_in_large_requests() {
        let dev = device(4096);
        let ra = ReadAhead::new(dev.clone());
        let before = dev.counters().reads;
        let mut buf = vec![0u8; 4096];
        for b in 0..4096 {
            ra.read(b, &mut buf).unwrap();
            assert_eq!(buf[0], b as u8);
        }
        let reads = dev.counters().reads - before;
        assert!(reads < 30, "{reads} device reads for 4096 blocks in order");
    }

    #[test]
    fn a_block_read_again_comes_from_what_was_kept() {
        let dev = device(64);
        let once = ReadOnce::new(dev.clone());
        let mut buf = vec![0u8; 4096];
        let before = dev.counters().reads;
        for _ in 0..3 {
            once.read(9, &mut buf).unwrap();
            assert_eq!(buf[0], 9);
        }
        assert_eq!(dev.counters().reads - before, 1);
        // As of its first read, even once the device changed.
        dev.write(9, &[99u8; 4096]).unwrap();
        once.read(9, &mut buf).unwrap();
        assert_eq!(buf[0], 9);
        // Runs of blocks are read each time.
        let mut two = vec![0u8; 8192];
        once.read(20, &mut two).unwrap();
        once.read(20, &mut two).unwrap();
        assert_eq!(dev.counters().reads - before, 3);
        assert_eq!((two[0], two[4096]), (20, 21));
    }
}
