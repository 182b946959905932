//! One job's conversation with the agent: the batches it asks for, from its group or from
//! a private stream of its own, the buffers it holds, and what is sent ahead unasked.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use nostall::loader::Next;
use nostall::{Batch, Epoch, Loader, Position};

use crate::group::{pulse_interval, Group, Served};
use crate::node::JoinedNode;
use crate::socket::{Channel, RecvError};
use crate::wire::{BatchHeader, Failure, NodeFigures, Reply, Request, MAX_FORGET};

use super::Agent;

/// One job's side of the conversation: its group, its private stream when it has one,
/// the batches it holds, and where the agent sends unasked.
pub(super) struct Session<'a> {
    agent: &'a Agent,
    name: String,
    member: u64,
    group: Arc<Group>,
    node: Option<Arc<JoinedNode>>,
    private: Option<Private>,
    held: HashMap<u64, Arc<Batch>>,
    next_ticket: u64,
    /// Buffers whose memfd this job holds (sent, not forgotten), and those it is told
    /// to forget (their stream ended) before the next answer.
    sent: HashSet<u64>,
    forget: Vec<u64>,
    /// The job's latest request, the batches it lets the agent send ahead, and the
    /// position sent next unasked (none after an epoch's end or a failure).
    ask: u64,
    credits: usize,
    pushing: Option<Position>,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // The job can no longer release what it holds, and may still map it (the agent
        // ended the conversation: out of protocol, or a send that timed out): those
        // buffers must never carry another batch under its tensors.
        for batch in self.held.values() {
            batch.retire();
        }
    }
}

/// A member's own stream, for positions the group cannot serve.
struct Private {
    loader: Loader,
    epoch: Option<Epoch>,
    /// Its buffers whose memfd the job was sent: they go with the loader.
    buffers: Vec<u64>,
}

impl<'a> Session<'a> {
    pub(super) fn new(agent: &'a Agent, name: &str, member: u64) -> Session<'a> {
        let (group, node) = agent
            .entry(name, |e| (e.group.clone(), e.node.clone()))
            .expect("the group exists while it has members");
        Session {
            agent,
            name: name.to_string(),
            member,
            group,
            node,
            private: None,
            held: HashMap::new(),
            next_ticket: 1,
            sent: HashSet::new(),
            forget: Vec::new(),
            ask: 0,
            credits: 0,
            pushing: None,
        }
    }

    pub(super) fn welcome(&self) -> Reply {
        let loader = self.group.loader();
        let layout = loader.config().pipeline.layout();
        Reply::Welcome(crate::Attached {
            group: self.name.clone(),
            members: self.group.stats(None).members as u32,
            batches_per_epoch: loader.batches_per_epoch() as u64,
            dataset_len: loader.catalog().len() as u64,
            sample_shape: layout.shape().to_vec(),
            dtype: layout.dtype().to_string(),
            classes: loader.catalog().classes().to_vec(),
            lease: self.agent.config.lease,
        })
    }

    pub(super) fn serve(&mut self, channel: &Channel, buf: &mut [u8]) {
        loop {
            // The job's credit allows the next batch: sent unasked (a job that stopped
            // reading stops it once it holds `credits` of them).
            let at = match self.pushing.filter(|_| self.held.len() < self.credits) {
                Some(at) => at,
                None => match self.request(channel, buf) {
                    Ok(Some(at)) => at,
                    Ok(None) => continue,
                    Err(None) => return,
                    Err(Some(why)) => {
                        // Out of protocol: refused, logged, and the connection ends; the
                        // agent goes on serving the others.
                        self.agent.refuse(channel, &why);
                        return;
                    }
                },
            };
            let (reply, fd_of) = self.next(at, channel);
            let fd = fd_of.as_ref().and_then(|b| b.shared_memory()).map(|m| m.fd);
            let sent = self
                .send_forget(channel)
                .and_then(|()| channel.send(&reply.encode(), fd));
            if let Err(e) = sent {
                eprintln!("nostall agent: a job stopped reading ({e}); its connection ends");
                return;
            }
        }
    }

    /// Tells the job which buffers to forget, if any: ahead of the answer that follows
    /// their stream's end, so that the job never holds them past it.
    fn send_forget(&mut self, channel: &Channel) -> std::io::Result<()> {
        let forget = std::mem::take(&mut self.forget);
        for buffers in forget.chunks(MAX_FORGET) {
            let buffers = buffers.to_vec();
            channel.send(&Reply::Forget { buffers }.encode(), None)?;
        }
        Ok(())
    }

    /// Ends the member's private stream (the group serves it again). Its buffers carry
    /// no more batches: the job is told to forget them, or one that falls out of its
    /// group every epoch (a pause past its lease) would keep a private loader's worth of
    /// shared memory per pause. Its batches the job still holds keep their mappings.
    fn end_private(&mut self) {
        if let Some(private) = self.private.take() {
            for id in &private.buffers {
                self.sent.remove(id);
            }
            self.forget.extend(private.buffers);
        }
    }

    /// Reads the job's next request: the position it asks for, or `None` after a
    /// release. `Err(None)`: the connection ended; `Err(Some(why))`: out of protocol.
    fn request(
        &mut self,
        channel: &Channel,
        buf: &mut [u8],
    ) -> Result<Option<Position>, Option<String>> {
        let request = match channel.recv(buf) {
            Ok(r) if r.fd.is_some() => {
                return Err(Some("a descriptor came with a request".to_string()))
            }
            Ok(r) => Request::decode(&buf[..r.len]).map_err(|e| Some(e.to_string()))?,
            Err(RecvError::Oversized) => return Err(Some("an oversized request".to_string())),
            Err(RecvError::Closed) => return Err(None),
            Err(RecvError::Io(e)) => {
                eprintln!("nostall agent: a job's connection failed: {e}");
                return Err(None);
            }
        };
        match request {
            Request::Next { at, ask, credits } => {
                self.ask = ask;
                self.credits = credits as usize;
                Ok(Some(at))
            }
            Request::Release { ticket } => {
                // Only progress renews the lease: a release of a batch the job holds. A job
                // repeating releases while it reads nothing would hold the group up for
                // ever.
                if self.held.remove(&ticket).is_some() {
                    self.group.touch(self.member);
                }
                Ok(None)
            }
            Request::Hello { .. } => Err(Some("a second hello".to_string())),
        }
    }

    /// The answer for the batch at `at`, and the batch whose memfd goes with it the first
    /// time; moves where the agent sends unasked to the batch after it. While the batch
    /// is made, the job is told every quarter lease that the agent still works on it.
    fn next(&mut self, at: Position, channel: &Channel) -> (Reply, Option<Arc<Batch>>) {
        self.pushing = None;
        let ask = self.ask;
        // Sent only where the socket has room: a job that does not read them has its
        // batches still to take, and the session must never block on it.
        let mut pulse = || {
            let _ = channel.send_if_room(&Reply::Working { ask }.encode());
        };
        if self.held.len() >= self.agent.config.max_held {
            let failure = Failure::text(format!(
                "this job holds {} batches of the agent: free the tensors of batches it is \
                 done with",
                self.held.len()
            ));
            return (Reply::Failed { failure, ask }, None);
        }
        let served = match self.group.next(self.member, at, &mut pulse) {
            Served::Private => self.private_next(at, &mut pulse),
            other => {
                self.end_private();
                (other, true)
            }
        };
        match served {
            (Served::Batch(batch), shared) => {
                let ticket = self.next_ticket;
                self.next_ticket += 1;
                let memory = batch
                    .shared_memory()
                    .expect("the agent's loaders use shared memory");
                let first = self.sent.insert(memory.id);
                if first && !shared {
                    if let Some(private) = &mut self.private {
                        private.buffers.push(memory.id);
                    }
                }
                let position = batch.position();
                let header = BatchHeader {
                    ask,
                    ticket,
                    buffer: memory.id,
                    buffer_len: memory.len as u64,
                    data_len: batch.data().len() as u64,
                    index: batch.index(),
                    epoch: position.epoch,
                    batch: position.batch,
                    sample: position.sample,
                    shared,
                    labels: batch.labels().to_vec(),
                    ids: batch.ids().to_vec(),
                    group: self.group.stats(Some(position)),
                    node: self.node.as_ref().map(|n| NodeFigures::of(&n.node.stats())),
                };
                self.held.insert(ticket, batch.clone());
                self.pushing = Some(position);
                (Reply::Batch(header), first.then_some(batch))
            }
            (Served::End, _) => (
                Reply::End {
                    epoch: at.epoch,
                    ask,
                },
                None,
            ),
            (Served::Failed(failure), _) => (Reply::Failed { failure, ask }, None),
            (Served::Private, _) => unreachable!("private streams serve batches"),
        }
    }

    /// The batch at `at` from this member's own stream, calling `pulse` every quarter
    /// lease while it is made.
    fn private_next(&mut self, at: Position, pulse: &mut dyn FnMut()) -> (Served, bool) {
        self.group.touch(self.member);
        if self.private.is_none() {
            let made = self.agent.entry(&self.name, |e| {
                e.builder.build(e.catalog.clone(), e.source.clone())
            });
            match made {
                Some(Ok(loader)) => {
                    self.private = Some(Private {
                        loader,
                        epoch: None,
                        buffers: Vec::new(),
                    })
                }
                Some(Err(e)) => return (Served::Failed(Failure::of(&e)), false),
                None => return (Served::Failed(Failure::text("the group is gone")), false),
            }
        }
        let private = self.private.as_mut().expect("made above");
        let in_step = matches!(&private.epoch, Some(epoch) if epoch.position() == at);
        if !in_step {
            private.epoch = None;
            match private.loader.resume(at) {
                Ok(epoch) => private.epoch = Some(epoch),
                Err(e) => return (Served::Failed(Failure::of(&e)), false),
            }
        }
        let epoch = private.epoch.as_mut().expect("started above");
        let beat = pulse_interval(self.agent.config.lease);
        loop {
            match epoch.next_within(beat) {
                Next::Batch(Ok(batch)) => return (Served::Batch(Arc::new(batch)), false),
                Next::Batch(Err(e)) => {
                    private.epoch = None;
                    return (Served::Failed(Failure::of(&e)), false);
                }
                Next::End => {
                    private.epoch = None;
                    return (Served::End, false);
                }
                Next::Pending => pulse(),
            }
        }
    }
}
