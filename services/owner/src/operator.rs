//! What the operator actions applied by the owner (`control`: terminate; `migrate`) share
//! after their commit.

use crate::context::{Core, Inner};
use crate::resume::queue_children;
use crate::work::Work;
use orbit_engine::next_timer;

/// What an operator's commit woke: tasks queued, the timer moved, children to start.
pub(crate) struct Woken {
    pub(crate) tasks: bool,
    pub(crate) timers: bool,
    pub(crate) children: Vec<crate::effects::ChildStart>,
}

/// After an operator's commit (terminate, migrate): the execution leaves memory (rebuilt
/// from the store at its next event), its readers are told, and whoever has new work is
/// woken.
pub(crate) fn committed(inner: &Inner, core: &mut Core, id: &str, w: &Work, woken: Woken) {
    core.hot.remove(id);
    inner.changes.publish([id]);
    if woken.tasks {
        inner.tasks_ready.notify_waiters();
    }
    if woken.timers || next_timer(&w.hot.def, &w.hot.state).is_none() {
        inner.timers_changed.notify_one();
    }
    queue_children(inner, woken.children);
}
