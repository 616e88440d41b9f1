//! Base (bottom layer): how much memory the engine may hold dirty (and clean)
//! by default:
//! a share of the memory this process may use, which is the machine's
//! physical memory or, inside a container, its memory control group's limit
//! when that is lower. Reads /proc and /sys only; the parsing is pure so
//! tests feed it text.
//!
//! Calls nothing else in the crate; the API re-exports it and `types`
//! uses it for `OpenOptions`' default.

use std::path::{Path, PathBuf};

/// The default [`crate::types::OpenOptions::dirty_limit`]: a sixty-fourth of
/// [`usable_memory`], at most 1 GiB and at least 64 MiB (as the kernel's own
/// dirty thresholds, a share of memory rather than a size). Where the memory
/// is so small that 64 MiB would be more than an eighth of it, the floor is
/// that eighth (but not under 4 MiB).
pub fn default_dirty_limit() -> u64 {
    dirty_limit_for(usable_memory())
}

/// The default [`crate::types::OpenOptions::clean_limit`]: four times the
/// default dirty limit (a sixteenth of [`usable_memory`], at most 4 GiB).
pub fn default_clean_limit() -> u64 {
    dirty_limit_for(usable_memory()).saturating_mul(4)
}

/// The default [`crate::types::OpenOptions::inode_limit`]: a sixteenth of
/// [`usable_memory`] at 1 KiB a cached inode (with its share of its
/// directory's entries and of the inode table), from 16,384 to 16,777,216
/// inodes. (The kernel's own inode and dentry caches have no bound but
/// memory pressure; past this one, inodes are loaded again from the
/// inode table, at about twice the cost of a cached stat.)
pub fn default_inode_limit() -> usize {
    inode_limit_for(usable_memory())
}

/// The default [`crate::types::OpenOptions::dir_leaf_limit`]: a 128th of
/// [`usable_memory`] at 8 KiB a leaf of a directory's tree in memory, from
/// 1,024 to 1,048,576 leaves (24,576 on a 24 GiB machine: some 2.4 million
/// names in one directory before its leaves are read again).
pub fn default_dir_leaf_limit() -> usize {
    dir_leaf_limit_for(usable_memory())
}

fn dir_leaf_limit_for(memory: u64) -> usize {
    (memory / 128 / 8192).clamp(1 << 10, 1 << 20) as usize
}

fn inode_limit_for(memory: u64) -> usize {
    (memory / 16 / 1024).clamp(1 << 14, 1 << 24) as usize
}

fn dirty_limit_for(memory: u64) -> u64 {
    let floor = (memory / 8).clamp(4 << 20, 64 << 20);
    (memory / 64).clamp(floor, 1 << 30)
}

/// Physical memory, lowered to the memory control group's limit (version 2
/// `memory.max` and `memory.high`, or version 1 `memory.limit_in_bytes`, on
/// this process's group and every ancestor) when one is set.
pub fn usable_memory() -> u64 {
    // SAFETY: sysconf has no preconditions; it answers -1 for an unknown name.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ram = u64::try_from(pages)
        .unwrap_or(0)
        .saturating_mul(u64::try_from(size).unwrap_or(0));
    let groups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit = cgroup_limit(&groups, Path::new("/sys/fs/cgroup"), |p| {
        std::fs::read_to_string(p).ok()
    });
    match limit {
        Some(limit) if ram == 0 || limit < ram => limit,
        _ => ram,
    }
}

/// The lowest memory limit on the groups `proc_cgroup` (the text of
/// /proc/self/cgroup) names under the cgroup mount `root`, reading each
/// limit file through `read`; `None` when no group sets one.
fn cgroup_limit(proc_cgroup: &str, root: &Path, read: impl Fn(&Path) -> Option<String>) -> Option<u64> {
    let mut lowest: Option<u64> = None;
    for line in proc_cgroup.lines() {
        // "hierarchy-id:controllers:path"; the path may itself hold colons.
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let (base, files): (PathBuf, &[&str]) = if controllers.is_empty() {
            (root.to_path_buf(), &["memory.max", "memory.high"])
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), &["memory.limit_in_bytes"])
        } else {
            continue;
        };
        // The group and each ancestor up to (not including) the root.
        let mut group = PathBuf::from(path.trim_start_matches('/'));
        while !group.as_os_str().is_empty() {
            for file in files {
                let text = read(&base.join(&group).join(file));
                if let Some(limit) = text.as_deref().and_then(parse_limit) {
                    lowest = Some(lowest.map_or(limit, |l| l.min(limit)));
                }
            }
            group.pop();
        }
    }
    lowest
}

/// A limit file's value in bytes: `None` for "max" and for version 1's
/// "unlimited" (a number near `i64::MAX`), or for text that is not a number.
fn parse_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 62).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn limit_of(proc_cgroup: &str, files: &[(&str, &str)]) -> Option<u64> {
        let files: HashMap<PathBuf, String> = files
            .iter()
            .map(|(p, v)| (PathBuf::from(p), v.to_string()))
            .collect();
        cgroup_limit(proc_cgroup, Path::new("/cg"), |p| files.get(p).cloned())
    }

    #[test]
    fn version_2_takes_the_lowest_limit_of_the_group_and_its_ancestors() {
        let files = [
            ("/cg/a/b/memory.max", "max\n"),
            ("/cg/a/b/memory.high", "805306368\n"),
            ("/cg/a/memory.max", "1073741824\n"),
            ("/cg/memory.max", "1024\n"), // the root: never read
        ];
        assert_eq!(limit_of("0::/a/b\n", &files), Some(768 << 20));
        assert_eq!(limit_of("0::/a\n", &files), Some(1 << 30));
        assert_eq!(limit_of("0::/\n", &files), None);
        assert_eq!(limit_of("0::/elsewhere\n", &files), None);
    }

    #[test]
    fn version_1_reads_the_memory_hierarchy_only() {
        let files = [
            ("/cg/memory/job/memory.limit_in_bytes", "9223372036854771712"),
            ("/cg/memory/job/x/memory.limit_in_bytes", "536870912"),
            ("/cg/cpu/job/x/memory.limit_in_bytes", "4096"),
        ];
        let groups = "4:memory:/job/x\n3:cpu,cpuacct:/job/x\n0::/\n";
        assert_eq!(limit_of(groups, &files), Some(512 << 20));
        // An unlimited group (version 1 writes a number near i64::MAX).
        assert_eq!(limit_of("4:memory:/job\n", &files), None);
        // Garbled lines and values are skipped, not trusted.
        assert_eq!(limit_of("garbage\n4:memory\n", &files), None);
        let bad = [("/cg/memory/j/memory.limit_in_bytes", "lots")];
        assert_eq!(limit_of("4:cpu,memory:/j\n", &bad), None);
    }

    #[test]
    fn the_inode_limit_is_a_share_of_memory_within_its_bounds() {
        assert_eq!(inode_limit_for(24 << 30), 1_572_864);
        assert_eq!(inode_limit_for(64 << 20), 1 << 14);
        assert_eq!(inode_limit_for(1 << 40), 1 << 24);
        assert_eq!(dir_leaf_limit_for(24 << 30), 24_576);
        assert_eq!(dir_leaf_limit_for(64 << 20), 1 << 10);
        assert_eq!(dir_leaf_limit_for(1 << 42), 1 << 20);
    }

    #[test]
    fn the_dirty_limit_is_a_share_of_memory_within_its_bounds() {
        assert_eq!(dirty_limit_for(24 << 30), 384 << 20);
        assert_eq!(dirty_limit_for(128 << 30), 1 << 30);
        assert_eq!(dirty_limit_for(2 << 30), 64 << 20);
        // Small containers: an eighth, not 64 MiB.
        assert_eq!(dirty_limit_for(256 << 20), 32 << 20);
        assert_eq!(dirty_limit_for(16 << 20), 4 << 20);
        // Unknown memory (0) still gets a working limit.
        assert_eq!(dirty_limit_for(0), 4 << 20);
    }
}
