//! Per-step timing of [`crate::graph::GraphNet`]'s forward and backward, off by default
//! (two clock reads per step when on): what `train_bench` prints with `QUANTKIT_PROFILE=1`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

pub(crate) static PROFILE_ON: AtomicBool = AtomicBool::new(false);
static PROFILE: Mutex<BTreeMap<&'static str, [f64; 3]>> = Mutex::new(BTreeMap::new());

/// Turns per-operator timing on or off.
pub fn set_profiling(on: bool) {
    PROFILE_ON.store(on, Ordering::Relaxed);
}

/// Whether timing is on.
pub(crate) fn on() -> bool {
    PROFILE_ON.load(Ordering::Relaxed)
}

/// Accumulated `(operator, forward seconds, backward seconds, forward calls)` since the
/// last call, then resets the counters.
pub fn take_profile() -> Vec<(&'static str, f64, f64, usize)> {
    let mut p = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let out = p
        .iter()
        .map(|(k, v)| (*k, v[0], v[1], v[2] as usize))
        .collect();
    p.clear();
    out
}

/// Adds the time since `t` to `name`'s forward (`slot` 0, counted as a call) or backward
/// (`slot` 1) total.
pub(crate) fn record(name: &'static str, slot: usize, t: Instant) {
    let dt = t.elapsed().as_secs_f64();
    let mut p = PROFILE.lock().unwrap_or_else(|e| e.into_inner());
    let e = p.entry(name).or_insert([0.0; 3]);
    e[slot] += dt;
    if slot == 0 {
        e[2] += 1.0;
    }
}
