//! The loader's workers are one pool; this table says which role each takes. A worker
//! fetches or prepares, and between two pieces of work (a sample prepared, a read ended)
//! asks the table whether to go on, take the other role or wait: it keeps its role while
//! the role has no more workers than wanted, takes the other if that wants more, and
//! otherwise waits until a role does. How many each role wants is set from outside: the
//! fetch role by the bound on reads in flight (Little's law, `readahead`), the prep role
//! by the consumer's side once a batch (`super`, and a rank's share of its
//! node). A worker is started only when the roles want more than there are, working or
//! waiting: a role that grows takes a waiting worker first.
//!
//! A worker in the middle of a piece of work (a read that blocks, a sample being
//! prepared, a wait for room or bytes) is not interrupted: a change takes effect as
//! pieces end, a sample or a read at a time.

use std::sync::{Condvar, Mutex, MutexGuard};

/// What a worker does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Reads samples' bytes into the read-ahead.
    Fetch,
    /// Prepares samples into their slots.
    Prep,
}

impl Role {
    /// The role's work, as an error message names it.
    pub(crate) fn doing(self) -> &'static str {
        match self {
            Role::Fetch => "fetching",
            Role::Prep => "preparing",
        }
    }

    fn slot(self) -> usize {
        match self {
            Role::Fetch => 0,
            Role::Prep => 1,
        }
    }

    #[cfg(test)]
    fn other(self) -> Role {
        match self {
            Role::Fetch => Role::Prep,
            Role::Prep => Role::Fetch,
        }
    }
}

/// Which role each worker of one run takes.
pub(crate) struct Roles {
    staff: Mutex<Staff>,
    /// Signalled when a role wants more workers, or the pool stops.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Staff {
    /// Workers each role was last said to want, by [`Role::slot`].
    wanted: [usize; 2],
    /// Workers in each role now.
    working: [usize; 2],
    /// Workers waiting for a role, and workers started that have not asked for one yet.
    idle: usize,
    starting: usize,
    /// Workers started so far (numbering them).
    started: usize,
    /// Roles with no work left (every read given, every sample claimed): they want no
    /// one from now on.
    done: [bool; 2],
    stopped: bool,
}

impl Staff {
    /// Workers `role` wants now: none once it has no work left.
    fn wants(&self, role: Role) -> usize {
        if self.done[role.slot()] {
            0
        } else {
            self.wanted[role.slot()]
        }
    }

    /// Workers the roles want beyond those working, waiting or starting.
    fn short(&self) -> usize {
        let missing: usize = [Role::Fetch, Role::Prep]
            .into_iter()
            .map(|r| self.wants(r).saturating_sub(self.working[r.slot()]))
            .sum();
        missing.saturating_sub(self.idle + self.starting)
    }

    /// A role that wants another worker, the fetch role first (prep waits on its bytes).
    fn open_role(&self) -> Option<Role> {
        [Role::Fetch, Role::Prep]
            .into_iter()
            .find(|&r| self.working[r.slot()] < self.wants(r))
    }
}

impl Roles {
    /// A table wanting `prep` prep workers and `fetch` fetch workers, none started.
    pub(crate) fn new(prep: usize, fetch: usize) -> Roles {
        let mut staff = Staff::default();
        staff.wanted[Role::Prep.slot()] = prep;
        staff.wanted[Role::Fetch.slot()] = fetch;
        Roles {
            staff: Mutex::new(staff),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Staff> {
        // Every update leaves the counts consistent, so a poisoned lock is still usable.
        self.staff.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the workers `role` wants (ignored once it has no work left), and wakes as
    /// many waiting workers as it now lacks beyond what it lacked: a bound on reads that
    /// grows by one wakes one worker, not every waiting one.
    pub(crate) fn want(&self, role: Role, workers: usize) {
        let mut staff = self.lock();
        if staff.done[role.slot()] {
            return;
        }
        let lacks = |staff: &Staff| staff.wants(role).saturating_sub(staff.working[role.slot()]);
        let before = lacks(&staff);
        staff.wanted[role.slot()] = workers;
        let wake = lacks(&staff).saturating_sub(before).min(staff.idle);
        drop(staff);
        // Each woken worker checks again under the lock; one that finds the role filled
        // (a worker between two pieces took it) waits again.
        for _ in 0..wake {
            self.changed.notify_one();
        }
    }

    /// The number of a worker to start, when the roles want more workers than there
    /// are (working, waiting or starting); counted as starting. Call again for another.
    pub(crate) fn hire(&self) -> Option<usize> {
        let mut staff = self.lock();
        if staff.stopped || staff.short() == 0 {
            return None;
        }
        staff.starting += 1;
        staff.started += 1;
        Some(staff.started - 1)
    }

    /// A worker counted by [`Roles::hire`] could not be started.
    pub(crate) fn not_started(&self) {
        self.lock().starting -= 1;
    }

    /// The role a worker takes next, having had `had` (`None`: a worker just started).
    /// It keeps its role while that has no more workers than wanted, else takes one that
    /// wants more, else waits until one does. `None` once the pool stopped: the worker
    /// leaves.
    pub(crate) fn next(&self, had: Option<Role>) -> Option<Role> {
        let mut staff = self.lock();
        match had {
            Some(role) if staff.stopped => {
                staff.working[role.slot()] -= 1;
                return None;
            }
            Some(role) if staff.working[role.slot()] <= staff.wants(role) => {
                return Some(role);
            }
            Some(role) => staff.working[role.slot()] -= 1,
            None => staff.starting -= 1,
        }
        loop {
            if staff.stopped {
                return None;
            }
            if let Some(role) = staff.open_role() {
                staff.working[role.slot()] += 1;
                return Some(role);
            }
            staff.idle += 1;
            staff = self.changed.wait(staff).unwrap_or_else(|e| e.into_inner());
            staff.idle -= 1;
        }
    }

    /// `role` has no work left (every read was given, or every sample claimed): it
    /// wants no one from now on, and its workers take the other role or wait. Once
    /// neither role has work, the pool stops.
    pub(crate) fn done(&self, role: Role) {
        let mut staff = self.lock();
        staff.done[role.slot()] = true;
        if staff.done == [true; 2] {
            staff.stopped = true;
            self.changed.notify_all();
        }
    }

    /// Stops the pool: every worker leaves at its next [`Roles::next`], waiting ones at
    /// once.
    pub(crate) fn stop(&self) {
        self.lock().stopped = true;
        self.changed.notify_all();
    }

    /// Workers `role` was last said to want (what it had while it had work).
    pub(crate) fn wanted(&self, role: Role) -> usize {
        self.lock().wanted[role.slot()]
    }

    /// Workers in `role` now, and the other role's.
    #[cfg(test)]
    fn working(&self, role: Role) -> (usize, usize) {
        let staff = self.lock();
        (
            staff.working[role.slot()],
            staff.working[role.other().slot()],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;

    /// Hires every worker the table wants, as threads that report each role they take
    /// (and `None` as they leave) on `tx`, moving on when told to on their own channel.
    fn start_all(
        roles: &Arc<Roles>,
        tx: &mpsc::Sender<(usize, Option<Role>)>,
    ) -> Vec<(mpsc::Sender<()>, std::thread::JoinHandle<()>)> {
        let mut workers = Vec::new();
        while let Some(n) = roles.hire() {
            let (roles, tx) = (roles.clone(), tx.clone());
            let (go, wait) = mpsc::channel::<()>();
            let handle = std::thread::spawn(move || {
                let mut role = roles.next(None);
                loop {
                    tx.send((n, role)).unwrap();
                    if role.is_none() || wait.recv().is_err() {
                        return;
                    }
                    role = roles.next(role);
                }
            });
            workers.push((go, handle));
        }
        workers
    }

    #[test]
    fn workers_are_hired_for_what_the_roles_want_fetch_first() {
        let roles = Arc::new(Roles::new(2, 1));
        let (tx, rx) = mpsc::channel();
        let workers = start_all(&roles, &tx);
        assert_eq!(workers.len(), 3);
        let mut taken: Vec<Option<Role>> = (0..3).map(|_| rx.recv().unwrap().1).collect();
        taken.sort_by_key(|r| r.map(Role::slot));
        assert_eq!(
            taken,
            [Some(Role::Fetch), Some(Role::Prep), Some(Role::Prep)]
        );
        assert_eq!(roles.hire(), None, "no more wanted");
        roles.stop();
        for (go, handle) in workers {
            go.send(()).unwrap();
            handle.join().unwrap();
        }
    }

    /// Spins until `roles` has `n` workers waiting for a role (no sleep: the verdict
    /// does not depend on how long that takes).
    fn until_idle(roles: &Roles, n: usize) {
        while roles.lock().idle != n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_worker_beyond_its_role_s_want_waits_then_takes_the_role_that_grows() {
        let roles = Arc::new(Roles::new(2, 1));
        let (tx, rx) = mpsc::channel();
        let workers = start_all(&roles, &tx);
        let first: Vec<(usize, Option<Role>)> = (0..3).map(|_| rx.recv().unwrap()).collect();
        let preps: Vec<usize> = first
            .iter()
            .filter(|(_, r)| *r == Some(Role::Prep))
            .map(|(n, _)| *n)
            .collect();
        // The prep role shrinks: one prep worker keeps its role, the next to finish a
        // piece has none to take and waits.
        roles.want(Role::Prep, 1);
        workers[preps[0]].0.send(()).unwrap();
        until_idle(&roles, 1);
        workers[preps[1]].0.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), (preps[1], Some(Role::Prep)), "kept");
        assert_eq!(roles.working(Role::Prep), (1, 1));
        // The fetch role grows: the waiting worker takes it; nobody is hired.
        roles.want(Role::Fetch, 2);
        assert_eq!(rx.recv().unwrap(), (preps[0], Some(Role::Fetch)));
        assert_eq!(roles.hire(), None);
        assert_eq!(roles.working(Role::Fetch), (2, 1));
        // A role that grows with nobody waiting hires.
        roles.want(Role::Prep, 2);
        assert_eq!(roles.hire(), Some(3));
        assert_eq!(roles.hire(), None, "one is starting");
        roles.not_started();
        // Stopped: a worker waiting leaves at once, the others as their pieces end.
        roles.want(Role::Prep, 1);
        workers[preps[1]].0.send(()).unwrap();
        assert_eq!(rx.recv().unwrap(), (preps[1], Some(Role::Prep)));
        roles.want(Role::Prep, 0);
        workers[preps[1]].0.send(()).unwrap();
        until_idle(&roles, 1);
        roles.stop();
        assert_eq!(rx.recv().unwrap(), (preps[1], None));
        for (go, handle) in workers {
            let _ = go.send(());
            handle.join().unwrap();
        }
        assert_eq!(roles.working(Role::Fetch), (0, 0), "every worker left");
    }

    #[test]
    fn a_role_with_no_work_left_wants_no_one_and_the_pool_stops_when_neither_has() {
        let roles = Roles::new(1, 3);
        roles.done(Role::Fetch);
        roles.want(Role::Fetch, 5);
        assert_eq!(
            roles.wanted(Role::Fetch),
            3,
            "the last said, kept for the figures"
        );
        assert_eq!(roles.hire(), Some(0));
        assert_eq!(roles.hire(), None, "only the prep worker");
        roles.not_started();
        assert_eq!(roles.hire(), Some(1), "a failed start is hired again");
        assert_eq!(roles.next(None), Some(Role::Prep));
        // Every sample claimed: the prep worker has no role to take, and the pool stops.
        roles.done(Role::Prep);
        assert_eq!(roles.next(Some(Role::Prep)), None);
        assert_eq!(roles.working(Role::Prep), (0, 0));
    }
}
