//! The data plane: framed TCP connections, one thread each, serving the node's cached
//! samples by catalog id.

use super::*;

/// Accepts data connections until the service stops, one thread each: a node has few
/// peers, each with a few fetch threads, so threads are cheap and keep the hot path
/// blocking and simple.
pub(super) fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next = 0u64;
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let Some(handshake) = admit(shared, peer, &shared.data_handshakes) else {
                    continue;
                };
                let stream = Arc::new(stream);
                let idle = Arc::new(IdleSince::default());
                let number = next;
                next += 1;
                {
                    let mut open = shared.connections.lock().unwrap_or_else(|e| e.into_inner());
                    let limit = shared.config.max_connections;
                    if open.len() >= limit && !shared.evict_idlest(&mut open) {
                        drop(open);
                        let reason = format!("{limit} data connections already open, none idle");
                        shared.reject("too-many-connections", &peer.to_string(), reason);
                        continue;
                    }
                    let open_one = Open {
                        stream: stream.clone(),
                        idle: idle.clone(),
                    };
                    open.insert(number, open_one);
                }
                let serving = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("nostall-peer-conn".into())
                    .spawn(move || {
                        serve_connection(stream, peer, &serving, handshake, &idle);
                        serving.forget(number);
                    });
                if let Err(err) = spawned {
                    eprintln!("nostall-peer: cannot serve {peer}: {err}");
                    shared.forget(number);
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(err) => match nostall::net::accept_failed(&err) {
                nostall::net::AcceptFailure::Retry => {}
                nostall::net::AcceptFailure::BackOff => {
                    eprintln!("nostall-peer: data accept failed: {err}; backing off");
                    std::thread::sleep(nostall::net::ACCEPT_BACKOFF);
                }
                nostall::net::AcceptFailure::Fatal => {
                    eprintln!("nostall-peer: data listener broken: {err}");
                    return;
                }
            },
        }
    }
}

/// Handshake, then requests until the client leaves or breaks the protocol.
pub(super) fn serve_connection(
    stream: Arc<TcpStream>,
    peer: SocketAddr,
    shared: &Shared,
    handshake: Handshake,
    idle: &IdleSince,
) {
    let peer = peer.to_string();
    let timeout = shared.config.io_timeout;
    if stream.set_nonblocking(false).is_err() || stream.set_nodelay(true).is_err() {
        return;
    }
    let Ok(tls) = rustls::ServerConnection::new(shared.tls.clone()) else {
        return;
    };
    let mut conn = rustls::StreamOwned::new(tls, Deadline::new(stream));
    // The whole handshake within one request's time: TLS, which proves that each end
    // knows the job's secret, then the client's hello.
    conn.sock.within(timeout);
    if let Err(err) = auth::handshake(&mut conn) {
        let reason = format!(
            "no TLS handshake with the job's identity ({err}); a node with another {}, or \
             not a node",
            auth::SECRET_VAR
        );
        shared.reject("unauthorized", &peer, reason);
        return;
    }
    // The node the client says it is: the secret does not prove which, so this only
    // counts bytes, it grants nothing.
    let from_own_node = match wire::read_hello(&mut conn) {
        Ok(node) => node as usize == shared.config.node,
        Err(err) => {
            let reason = format!("bad hello: {err}");
            shared.reject("bad-request", &peer, reason.clone());
            let _ = wire::write_response(&mut conn, Status::BadRequest, reason.as_bytes());
            return;
        }
    };
    if wire::write_response(&mut conn, Status::Ok, &[]).is_err() {
        return;
    }
    // Authenticated: no longer among its address's handshakes.
    drop(handshake);

    let mut bytes = Vec::new();
    loop {
        // A connection may idle between requests (between epochs, say), up to a limit
        // (and, at the connection limit, until a new one needs its place); once a request
        // starts, it and its answer must finish within the timeout.
        if conn.sock.idle(IDLE_LIMIT).is_err() {
            return;
        }
        idle.set(shared);
        let requested = matches!(conn.fill_buf(), Ok(buffered) if !buffered.is_empty());
        idle.clear();
        if !requested {
            return;
        }
        conn.sock.within(timeout);
        let request = match wire::read_request(&mut conn) {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => return,
        };
        let id = match request {
            WireRequest::Fetch(id) => id,
            WireRequest::Bad(reason) => {
                shared.reject("bad-request", &peer, reason.clone());
                let _ = wire::write_response(&mut conn, Status::BadRequest, reason.as_bytes());
                return;
            }
        };
        let (status, payload): (Status, &[u8]) = if id >= shared.samples {
            let reason = format!("no sample {id}: the catalog has {}", shared.samples);
            shared.reject("unknown-id", &peer, reason);
            (Status::UnknownId, b"unknown id")
        } else if !shared.cache.holds(id) {
            let reason = format!("sample {id} is not node {}'s to serve", shared.config.node);
            shared.reject("not-held", &peer, reason);
            (Status::NotHeld, b"not held here")
        } else {
            match shared.cache.read(id, &mut bytes) {
                Ok(()) if bytes.len() as u64 > shared.config.max_response_bytes => {
                    let reason = format!(
                        "sample {id} is {} bytes, over the limit of {}",
                        bytes.len(),
                        shared.config.max_response_bytes
                    );
                    shared.reject("too-large", &peer, reason);
                    (Status::TooLarge, b"over the size limit")
                }
                Ok(()) => {
                    shared.served_samples.fetch_add(1, Ordering::Relaxed);
                    shared
                        .served_bytes
                        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    if from_own_node {
                        shared
                            .served_local_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    }
                    (Status::Ok, &bytes)
                }
                Err(cause) => {
                    bytes = cause.to_string().into_bytes();
                    (Status::Unavailable, &bytes)
                }
            }
        };
        if wire::write_response(&mut conn, status, payload).is_err() {
            return;
        }
    }
}
