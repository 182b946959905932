//! Who may start a handshake, on either plane: an address of the job (once the peers are
//! known), with fewer handshakes under way than its budget allows.

use super::*;

/// Whether a connection from `peer` may start its handshake: from an address of the job
/// (once its peers are known), and one with fewer handshakes under way than `budget`
/// allows. The place it takes, given back when the handshake ends.
pub(super) fn admit(
    shared: &Shared,
    peer: SocketAddr,
    budget: &Arc<HandshakeBudget>,
) -> Option<Handshake> {
    let ip = peer.ip().to_canonical();
    let known = shared
        .admitted
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_none_or(|admitted| admitted.contains(&ip));
    if !known {
        let reason = format!("{ip} is not the address of a node of the job");
        shared.reject("not-a-peer", &peer.to_string(), reason);
        return None;
    }
    let taken = budget.take(ip);
    if taken.is_none() {
        let reason = format!(
            "{} handshakes from {ip} already under way",
            budget.per_address
        );
        shared.reject("too-many-handshakes", &peer.to_string(), reason);
    }
    taken
}

/// How many connections from each address may be in their handshake at once.
pub(super) struct HandshakeBudget {
    per_address: usize,
    under_way: Mutex<HashMap<IpAddr, usize>>,
}

impl HandshakeBudget {
    pub(super) fn new(per_address: usize) -> Arc<HandshakeBudget> {
        Arc::new(HandshakeBudget {
            per_address,
            under_way: Mutex::default(),
        })
    }

    /// A place for a handshake from `ip`, if it has one left.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<Handshake> {
        let mut under_way = self.under_way.lock().unwrap_or_else(|e| e.into_inner());
        let count = under_way.entry(ip).or_default();
        if *count >= self.per_address {
            return None;
        }
        *count += 1;
        Some(Handshake {
            budget: self.clone(),
            ip,
        })
    }
}

/// A connection's place among its address's handshakes under way.
pub(super) struct Handshake {
    budget: Arc<HandshakeBudget>,
    ip: IpAddr,
}

impl Drop for Handshake {
    fn drop(&mut self) {
        let mut under_way = self
            .budget
            .under_way
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = under_way.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                under_way.remove(&self.ip);
            }
        }
    }
}
