//! Lock hierarchies: which CPUs share which level of an HMCS tree.
//!
//! Read from the machine (`/sys/devices/system/cpu` and
//! `/sys/devices/system/node`: SMT siblings share a core, cores a package,
//! packages or dies a NUMA node) or given by hand (`"4x2"`: a root with 4
//! children of 2 leaves each), so that deep trees can be exercised on a
//! small machine.

use crate::Error;
use std::collections::BTreeMap;

/// Passing threshold used when none is given: how many times a lock may be
/// handed over inside one domain before it must go up a level.
pub const DEFAULT_THRESHOLD: u32 = 64;

/// How a thread is mapped to a leaf of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSource {
    /// The CPU the thread is running on when it asks for the lock.
    Current,
    /// A per-thread sequence number (first thread 0, next 1, ...): used for
    /// hand-given hierarchies, whose leaves need not exist on the machine.
    ThreadOrder,
}

/// One level of a hierarchy below the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// Human name ("core", "package", "numa-node", "level-2").
    pub name: String,
    /// Passing threshold at this level.
    pub threshold: u32,
    /// For each CPU slot, the index of its domain at this level.
    pub domain_of_cpu: Vec<u32>,
    /// Number of domains at this level.
    pub domains: u32,
}

/// A locking hierarchy: levels from the leaves up to (not including) the
/// root, which always exists and holds every CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// Levels, leaf first.
    pub levels: Vec<Level>,
    /// Number of CPU slots (CPU numbers are taken modulo this).
    pub cpus: usize,
    /// How threads are mapped to CPU slots.
    pub cpu_source: CpuSource,
}

impl Hierarchy {
    /// Depth of the HMCS tree (levels + root): `HMCS<depth>`.
    pub fn depth(&self) -> usize {
        self.levels.len() + 1
    }

    /// A flat hierarchy (root only): `HMCS<1>`, which is MCS.
    pub fn flat(cpus: usize) -> Hierarchy {
        Hierarchy {
            levels: Vec::new(),
            cpus: cpus.max(1),
            cpu_source: CpuSource::Current,
        }
    }

    /// Parses a hand-given hierarchy: fan-outs from the root down, separated
    /// by `x`, optionally followed by `:` and passing thresholds from the
    /// leaf level up, separated by commas. `"2x2x2:8,4,2"` is an `HMCS<4>`
    /// over 8 leaves with threshold 8 at the leaves. Threads are mapped to
    /// leaves in the order they first take a hierarchical lock.
    pub fn parse(spec: &str) -> Result<Hierarchy, Error> {
        let bad = |reason: &str| Error::BadHierarchy {
            spec: spec.to_string(),
            reason: reason.to_string(),
        };
        let (fan, thr) = match spec.split_once(':') {
            Some((f, t)) => (f, Some(t)),
            None => (spec, None),
        };
        let mut fanouts = Vec::new();
        for f in fan.split('x') {
            let v: usize = f.trim().parse().map_err(|_| {
                bad("fan-outs must be positive integers separated by 'x', e.g. 4x2")
            })?;
            if v == 0 || v > 4096 {
                return Err(bad("each fan-out must be between 1 and 4096"));
            }
            fanouts.push(v);
        }
        let cpus: usize = fanouts.iter().product();
        if cpus > 65536 {
            return Err(bad("more than 65536 leaves"));
        }
        let thresholds: Vec<u32> = match thr {
            None => vec![DEFAULT_THRESHOLD; fanouts.len()],
            Some(t) => {
                let v: Result<Vec<u32>, _> =
                    t.split(',').map(|x| x.trim().parse::<u32>()).collect();
                let v =
                    v.map_err(|_| bad("thresholds must be positive integers separated by ','"))?;
                if v.len() != fanouts.len() {
                    return Err(bad("give one threshold per fan-out (leaf level first)"));
                }
                if v.iter().any(|&x| x == 0 || x >= u32::MAX - 2) {
                    return Err(bad("thresholds must be at least 1"));
                }
                v
            }
        };
        // Leaf-first: level k groups 'size' consecutive slots, where size is
        // the product of the k lowest fan-outs.
        let mut levels = Vec::new();
        let mut size = 1usize;
        for (k, f) in fanouts.iter().rev().enumerate() {
            levels.push(Level {
                name: format!("level-{}", k + 1),
                threshold: thresholds[k],
                domain_of_cpu: (0..cpus).map(|c| (c / size) as u32).collect(),
                domains: (cpus / size) as u32,
            });
            size *= f;
        }
        Ok(Hierarchy {
            levels,
            cpus,
            cpu_source: CpuSource::ThreadOrder,
        })
    }

    /// Reads the machine's hierarchy from sysfs: core (SMT siblings),
    /// package, NUMA node; levels that do not split their parent (a single
    /// socket, a single NUMA node) are left out.
    pub fn from_machine() -> Result<Hierarchy, Error> {
        let m = MachineTopology::read()?;
        Ok(m.hierarchy(&["core", "package", "numa-node"], false))
    }

    /// The two-level hierarchy of a cohort lock: NUMA nodes (or packages when
    /// the machine reports no nodes) under a root. Kept two-level even on a
    /// single-node machine, where it then behaves like MCS plus one
    /// uncontended lock.
    pub fn cohort_from_machine() -> Result<Hierarchy, Error> {
        let m = MachineTopology::read()?;
        let name = if m.has_nodes { "numa-node" } else { "package" };
        Ok(m.hierarchy(&[name], true))
    }

    /// One line describing the tree, e.g. `HMCS<2>: core(2 domains, threshold 64) > root`.
    pub fn describe(&self) -> String {
        let mut s = format!("HMCS<{}>: ", self.depth());
        for l in &self.levels {
            s += &format!(
                "{}({} domains, threshold {}) > ",
                l.name, l.domains, l.threshold
            );
        }
        s + "root"
    }

    /// Sets every level's passing threshold (leaf first); missing entries keep
    /// their value.
    pub fn set_thresholds(&mut self, t: &[u32]) {
        for (l, v) in self.levels.iter_mut().zip(t) {
            l.threshold = (*v).max(1);
        }
    }

    /// Checks that each domain lies inside one domain of the level above.
    pub(crate) fn validate(&self) -> Result<(), String> {
        for (k, l) in self.levels.iter().enumerate() {
            if l.domain_of_cpu.len() != self.cpus {
                return Err(format!(
                    "level {} maps {} CPUs, expected {}",
                    l.name,
                    l.domain_of_cpu.len(),
                    self.cpus
                ));
            }
            if let Some(up) = self.levels.get(k + 1) {
                let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
                for c in 0..self.cpus {
                    let p = *parent
                        .entry(l.domain_of_cpu[c])
                        .or_insert(up.domain_of_cpu[c]);
                    if p != up.domain_of_cpu[c] {
                        return Err(format!(
                            "a {} domain straddles two {} domains",
                            l.name, up.name
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

struct MachineTopology {
    cpus: usize,
    /// For each named partition, the domain key of each CPU slot.
    keys: BTreeMap<&'static str, Vec<String>>,
    has_nodes: bool,
}

fn read_trim(p: &str) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub(crate) fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().ok()?),
        }
    }
    Some(v)
}

impl MachineTopology {
    fn read() -> Result<MachineTopology, Error> {
        let topo = |reason: String| Error::Topology { reason };
        let online = read_trim("/sys/devices/system/cpu/online")
            .ok_or_else(|| topo("cannot read /sys/devices/system/cpu/online".into()))?;
        let list =
            parse_cpulist(&online).ok_or_else(|| topo(format!("bad CPU list {online:?}")))?;
        let cpus = list.iter().max().map_or(1, |m| m + 1);
        let mut core = vec![String::from("?"); cpus];
        let mut package = vec![String::from("?"); cpus];
        let mut node = vec![String::from("0"); cpus];
        for (i, &c) in list.iter().enumerate() {
            let base = format!("/sys/devices/system/cpu/cpu{c}/topology");
            let pkg =
                read_trim(&format!("{base}/physical_package_id")).unwrap_or_else(|| "0".into());
            core[c] = read_trim(&format!("{base}/core_cpus_list"))
                .or_else(|| read_trim(&format!("{base}/thread_siblings_list")))
                .unwrap_or_else(|| format!("cpu{i}"));
            package[c] = pkg;
        }
        let mut has_nodes = false;
        if let Ok(rd) = std::fs::read_dir("/sys/devices/system/node") {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                if let Some(id) = name
                    .strip_prefix("node")
                    .filter(|s| s.chars().all(|c| c.is_ascii_digit()))
                {
                    if let Some(cl) = read_trim(&format!("/sys/devices/system/node/{name}/cpulist"))
                        .and_then(|s| parse_cpulist(&s))
                    {
                        has_nodes = true;
                        for c in cl.into_iter().filter(|&c| c < cpus) {
                            node[c] = id.to_string();
                        }
                    }
                }
            }
        }
        // Offline CPUs (holes in the list) are put in the domains of CPU 0
        // so that a stray CPU number cannot create an empty branch.
        for c in 0..cpus {
            if !list.contains(&c) {
                core[c] = core[list[0]].clone();
                package[c] = package[list[0]].clone();
                node[c] = node[list[0]].clone();
            }
        }
        let mut keys = BTreeMap::new();
        keys.insert("core", core);
        keys.insert("package", package);
        keys.insert("numa-node", node);
        Ok(MachineTopology {
            cpus,
            keys,
            has_nodes,
        })
    }

    fn hierarchy(&self, names: &[&'static str], keep_all: bool) -> Hierarchy {
        let mut levels: Vec<Level> = Vec::new();
        for &name in names {
            let keys = &self.keys[name];
            let mut ids: BTreeMap<&str, u32> = BTreeMap::new();
            let domain_of_cpu: Vec<u32> = keys
                .iter()
                .map(|k| {
                    let n = ids.len() as u32;
                    *ids.entry(k.as_str()).or_insert(n)
                })
                .collect();
            levels.push(Level {
                name: name.into(),
                threshold: DEFAULT_THRESHOLD,
                domain_of_cpu,
                domains: ids.len() as u32,
            });
        }
        // Finest first; a node may hold several packages or a package
        // several nodes, so order by number of domains.
        levels.sort_by_key(|l| std::cmp::Reverse(l.domains));
        if !keep_all {
            // Drop a level that splits nothing: same partition as the level
            // above it (or a single domain, which is the root's).
            let mut kept: Vec<Level> = Vec::new();
            for (i, l) in levels.iter().enumerate() {
                let above_same = match levels.get(i + 1) {
                    Some(up) => same_partition(&l.domain_of_cpu, &up.domain_of_cpu),
                    None => l.domains <= 1,
                };
                if !above_same {
                    kept.push(l.clone());
                }
            }
            levels = kept;
        }
        let mut h = Hierarchy {
            levels,
            cpus: self.cpus,
            cpu_source: CpuSource::Current,
        };
        // An odd machine whose levels do not nest: keep only the finest.
        if h.validate().is_err() {
            h.levels.truncate(1);
        }
        h
    }
}

fn same_partition(a: &[u32], b: &[u32]) -> bool {
    let mut ab: BTreeMap<u32, u32> = BTreeMap::new();
    let mut ba: BTreeMap<u32, u32> = BTreeMap::new();
    a.iter()
        .zip(b)
        .all(|(&x, &y)| *ab.entry(x).or_insert(y) == y && *ba.entry(y).or_insert(x) == x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hand_given_hierarchies() {
        let h = Hierarchy::parse("2x2x2:8,4,2").unwrap();
        assert_eq!(h.depth(), 4);
        assert_eq!(h.cpus, 8);
        assert_eq!(h.levels[0].domains, 8);
        assert_eq!(h.levels[1].domain_of_cpu, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        assert_eq!(h.levels[2].domain_of_cpu, vec![0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(h.levels[0].threshold, 8);
        assert_eq!(h.levels[2].threshold, 2);
        h.validate().unwrap();
    }

    #[test]
    fn rejects_bad_hierarchies_with_a_reason() {
        for bad in ["", "2x", "0x2", "ax2", "2x2:1", "2:0", "2x2:1,b"] {
            let e = Hierarchy::parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.len() > bad.len() + 20, "{bad}: {e}");
        }
    }

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpulist("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpulist("3-1"), None);
    }

    #[test]
    fn machine_hierarchy_nests_and_covers_every_cpu() {
        let h = Hierarchy::from_machine().unwrap();
        h.validate().unwrap();
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(h.cpus >= n);
        let c = Hierarchy::cohort_from_machine().unwrap();
        assert_eq!(c.depth(), 2);
    }

    #[test]
    fn same_partition_ignores_labels() {
        assert!(same_partition(&[0, 0, 1], &[5, 5, 2]));
        assert!(!same_partition(&[0, 1, 1], &[0, 0, 1]));
    }
}
