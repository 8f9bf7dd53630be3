//go:build e2e

package e2e

// secPy is the probe tool the security rows copy into the launch dir as
// sec.py. It crafts what the sandbox's own tools cannot: raw ClientHellos,
// DNS sweeps of the session subnet, raw and tun sockets, link-local
// multicast. Each command exits 0 only when its traffic got somewhere (an
// answer, an echo, a server hello), so "the client failed" is its exit
// status; the nonces it carries are what the logs are searched for.
const secPy = `#!/usr/bin/env python3
# Imports are local where they are slow: a session runs this a hundred times.
import errno, os, socket, struct, sys

def dns_query(name, qtype):
    import random
    hdr = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.rstrip(".").split(".")) + b"\0"
    return hdr + q + struct.pack(">HH", qtype, 1)

def dns_result(resp):
    if len(resp) < 12:
        return None
    rcode = resp[3] & 0x0F
    ancount = struct.unpack(">H", resp[6:8])[0]
    return rcode, ancount

def ask(server, name, qtype, tcp, timeout=1.5, port=53):
    q = dns_query(name, qtype)
    fam = socket.AF_INET6 if ":" in server else socket.AF_INET
    try:
        if tcp:
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect((server, port))
            s.sendall(struct.pack(">H", len(q)) + q)
            n = struct.unpack(">H", recv_exact(s, 2))[0]
            resp = recv_exact(s, n)
        else:
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.settimeout(timeout)
            s.sendto(q, (server, port))
            resp, _ = s.recvfrom(65535)
        s.close()
        return dns_result(resp), None
    except OSError as e:
        return None, err_name(e)

def recv_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise OSError(errno.ECONNRESET, "closed")
        out += b
    return out

def err_name(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    if getattr(e, "errno", None):
        return errno.errorcode.get(e.errno, str(e.errno))
    return str(e) or type(e).__name__

def own_prefix():
    import subprocess
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "eth0"], capture_output=True, text=True).stdout.split()
    addr = out[out.index("inet") + 1]
    ip, bits = addr.split("/")
    return ip, int(bits)

def cmd_sweep(nonce):
    """DNS to every address of the session /24, UDP and TCP."""
    import threading
    ip, bits = own_prefix()
    base = ip.rsplit(".", 1)[0]
    results = {}
    lock = threading.Lock()
    def one(i, tcp):
        r, err = ask("%s.%d" % (base, i), "%s-s%d%s.denied.test" % (nonce, i, "t" if tcp else "u"), 1, tcp)
        with lock:
            results[(i, tcp)] = (r, err)
    threads = [threading.Thread(target=one, args=(i, tcp)) for i in range(1, 255) for tcp in (False, True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answered, leaked, errs = [], [], {}
    for (i, tcp), (r, err) in sorted(results.items()):
        proto = "tcp" if tcp else "udp"
        if r is None:
            errs[err] = errs.get(err, 0) + 1
            continue
        answered.append("%s.%d/%s rcode=%d answers=%d" % (base, i, proto, r[0], r[1]))
        if r[0] == 0 and r[1] > 0:
            leaked.append("%s.%d/%s" % (base, i, proto))
    print("own address %s/%d; swept %s.1-254 over udp and tcp" % (ip, bits, base))
    print("replies: " + ("; ".join(answered) or "none"))
    print("no reply: " + ", ".join("%s x%d" % kv for kv in sorted(errs.items())))
    print("answered with records: " + (", ".join(leaked) or "none"))
    return 0 if leaked else 1

def payload_for(proto, port, tag):
    if proto == "tcp" and port == 80:
        return ("GET /%s HTTP/1.0\r\nHost: %s.denied.test\r\n\r\n" % (tag, tag)).encode()
    if proto == "tcp" and port == 3128:
        return ("CONNECT %s.denied.test:443 HTTP/1.1\r\nHost: %s.denied.test:443\r\n\r\n" % (tag, tag)).encode()
    return (tag + "\n").encode()

def send(proto, host, port, payload, timeout=3):
    """Connect (TCP) or send (UDP), then wait for any reply."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        if proto == "tcp":
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect((host, port))
            s.sendall(payload)
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            data = s.recv(4096)
        else:
            # Connected, so that an ICMP error ends the wait at once.
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.settimeout(timeout)
            s.connect((host, port))
            s.send(payload)
            data = s.recv(4096)
        s.close()
        return "reply %d bytes" % len(data) if data else "connected, no reply", bool(data) or proto == "tcp"
    except OSError as e:
        return err_name(e), False

def cmd_direct(*specs):
    """Each spec is proto|host|port|payload: TCP is connect and send, UDP waits for a reply."""
    import threading
    results = {}
    def one(spec):
        proto, host, port, tag = spec.split("|")
        results[spec] = send(proto, host, int(port), payload_for(proto, int(port), tag))
    threads = [threading.Thread(target=one, args=(s,)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = False
    for spec in specs:
        what, ok = results[spec]
        proto, host, port, tag = spec.split("|")
        print("%s %s:%s %s %s" % (proto, host, port, "ok" if ok else "failed", what))
        got = got or ok
    return 0 if got else 1

def cmd_send(proto, host, port, payload):
    what, ok = send(proto, host, int(port), (payload + "\n").encode())
    print("%s %s:%s %s" % (proto, host, port, what))
    return 0 if ok else 1

def sendto(host, port, data, flags, what):
    """One unconnected UDP sendto, then a wait for any reply. A sendto that
    succeeds counts as a success: the datagram left the socket."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    try:
        s.sendto(data, flags, (host, int(port)))
    except OSError as e:
        print("%s sendto %s:%s: %s" % (what, host, port, err_name(e)))
        return 1
    try:
        got, frm = s.recvfrom(65535)
        print("%s sendto %s:%s: sent %d bytes, reply of %d bytes from %s" % (what, host, port, len(data), len(got), frm[0]))
    except OSError as e:
        print("%s sendto %s:%s: sent %d bytes, no reply (%s)" % (what, host, port, len(data), err_name(e)))
    return 0

def cmd_dontroute(host, port, payload):
    """An unconnected UDP sendto with MSG_DONTROUTE: the kernel skips the
    routing table and sends only to a host on a directly attached link."""
    return sendto(host, port, (payload + "\n").encode(), socket.MSG_DONTROUTE, "MSG_DONTROUTE")

def varint(n):
    if n < 64:
        return bytes([n])
    if n < 16384:
        return struct.pack(">H", 0x4000 | n)
    return struct.pack(">I", 0x80000000 | n)

def cmd_quic(host, port, nonce):
    """A QUIC v1 Initial as a client's first datagram looks: long header,
    connection ids, then a CRYPTO frame with a ClientHello (SNI
    allowed.test, ALPN h3 and the nonce), padded to 1200 bytes. Unlike real
    QUIC the payload is not encrypted, so every log and the sniffer can
    see the nonce. Unconnected sendto, then a wait for any reply (the fake
    echoes)."""
    hello = client_hello("allowed.test", ["h3", nonce])[5:]
    frame = b"\x06" + varint(0) + varint(len(hello)) + hello
    pn = b"\x00\x00\x00\x01"
    head = b"\xc3" + struct.pack(">I", 1) + b"\x08" + os.urandom(8) + b"\x08" + os.urandom(8) + varint(0)
    pad = max(0, 1200 - len(head) - 2 - len(pn) - len(frame))
    payload = frame + b"\x00" * pad
    packet = head + struct.pack(">H", 0x4000 | (len(pn) + len(payload))) + pn + payload
    return sendto(host, port, packet, 0, "QUIC Initial")

def cmd_resolve(name):
    """The system resolver (getaddrinfo), with its error by name."""
    try:
        addrs = sorted({a[4][0] for a in socket.getaddrinfo(name, None)})
    except socket.gaierror as e:
        names = {getattr(socket, k): k for k in ("EAI_NONAME", "EAI_AGAIN", "EAI_FAIL", "EAI_NODATA", "EAI_ADDRFAMILY", "EAI_SERVICE", "EAI_SYSTEM") if hasattr(socket, k)}
        print("getaddrinfo %s: %s (%s)" % (name, names.get(e.errno, str(e.errno)), e.strerror))
        return 1
    print("getaddrinfo %s: %s" % (name, " ".join(addrs)))
    return 0

def cmd_plant(path):
    """Leaves a unix socket at path (bound, then the process exits)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
    except OSError as e:
        print("bind %s: %s" % (path, err_name(e)))
        return 1
    print("planted %s" % path)
    return 0

def ext(t, data):
    return struct.pack(">HH", t, len(data)) + data

def ech_ext(payload):
    """encrypted_client_hello (0xfe0d) as a client's outer hello carries it:
    type outer, HPKE suite, config id, enc, then payload, here in clear."""
    data = b"\x00" + struct.pack(">HHB", 1, 1, 7) + struct.pack(">H", 32) + os.urandom(32)
    return ext(0xFE0D, data + struct.pack(">H", len(payload)) + payload)

def client_hello(sni=None, alpn=None, pad=0, sni_last=False, ech=None):
    exts = []
    sni_ext = None
    if sni is not None:
        name = sni.encode("latin-1")
        entry = b"\x00" + struct.pack(">H", len(name)) + name
        sni_ext = ext(0, struct.pack(">H", len(entry)) + entry)
    if alpn:
        protos = b"".join(bytes([len(p)]) + p.encode() for p in alpn)
        exts.append(ext(16, struct.pack(">H", len(protos)) + protos))
    exts.append(ext(43, b"\x04\x03\x04\x03\x03"))
    exts.append(ext(10, b"\x00\x02\x00\x1d"))
    exts.append(ext(13, b"\x00\x04\x04\x03\x08\x04"))
    exts.append(ext(51, struct.pack(">HHH", 36, 0x1D, 32) + os.urandom(32)))
    if ech is not None:
        exts.append(ech_ext(ech.encode()))
    if pad:
        exts.append(ext(21, b"\x00" * pad))
    if sni_ext is not None:
        if sni_last:
            exts.append(sni_ext)
        else:
            exts.insert(0, sni_ext)
    e = b"".join(exts)
    body = b"\x03\x03" + os.urandom(32) + b"\x20" + os.urandom(32) + b"\x00\x04\x13\x01\xc0\x2f" + b"\x01\x00" + struct.pack(">H", len(e)) + e
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    out = b""
    for i in range(0, len(hs), 16384):
        chunk = hs[i:i + 16384]
        out += b"\x16\x03\x01" + struct.pack(">H", len(chunk)) + chunk
    return out

def cmd_hello(host, port, *args):
    """A hand-made ClientHello: --sni NAME (\\0 allowed), --no-sni, --alpn P, --pad N, --sni-last,
    --ech PAYLOAD (an encrypted_client_hello extension carrying PAYLOAD in clear),
    --link KEY (a cluster router's link preamble first, as the agent pod's forwarder sends it)."""
    sni, alpn, pad, last, ech, link = None, [], 0, False, None, b""
    args = list(args)
    while args:
        a = args.pop(0)
        if a == "--sni":
            sni = args.pop(0).replace("\\0", "\0")
        elif a == "--alpn":
            alpn.append(args.pop(0))
        elif a == "--pad":
            pad = int(args.pop(0))
        elif a == "--sni-last":
            last = True
        elif a == "--ech":
            ech = args.pop(0)
        elif a == "--link":
            link = ("agent-sandbox-link " + args.pop(0) + "\n").encode()
    hello = client_hello(sni, alpn, pad, last, ech)
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(link + hello)
        data = s.recv(5)
        if data[:5] == b"agent":
            # A front's refusal: one line of text.
            while not data.endswith(b"\n") and len(data) < 512:
                more = s.recv(512)
                if not more:
                    break
                data += more
            s.close()
            print("hello of %d bytes: refused: %s" % (len(hello), data.decode(errors="replace").strip()))
            return 1
        s.close()
    except OSError as e:
        print("hello of %d bytes: %s" % (len(hello), err_name(e)))
        return 1
    if data[:1] == b"\x16":
        print("hello of %d bytes: server hello" % len(hello))
        return 0
    print("hello of %d bytes: %s" % (len(hello), "alert" if data[:1] == b"\x15" else "closed without a reply"))
    return 1

def https_exchange(host, port, sni, first_line, host_header):
    """TLS without verification (routing is the point), then one request:
    the reply, or None and why not."""
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        raw = socket.create_connection((host, int(port)), timeout=10)
        s = ctx.wrap_socket(raw, server_hostname=sni or None)
        s.sendall(("%s\r\nHost: %s\r\nConnection: close\r\n\r\n" % (first_line, host_header)).encode())
        data = b""
        while True:
            b = s.recv(4096)
            if not b:
                break
            data += b
        s.close()
    except OSError as e:
        return None, err_name(e)
    return data.decode("latin-1"), None

def cmd_https(host, port, sni, first_line, host_header):
    text, err = https_exchange(host, port, sni, first_line, host_header)
    if text is None:
        print("tls to %s:%s sni=%r: %s" % (host, port, sni, err))
        return 1
    print(text)
    return 0 if "hello from" in text else 1

def cmd_mark(*specs):
    """The markers that close a batch of probes (marker_test.go). Each spec
    is kind|host|port|nonce: udp or tcp send the nonce as a line, http a
    GET and proxy a CONNECT naming it, dns-udp and dns-tcp ask for
    NONCE.marker.test, https is TLS with that SNI and a GET of /NONCE. All
    go at once; each waits for its reply, which every listener of the
    fakes sends after it has logged. The test reads the logs, not this."""
    import threading
    results = {}
    def one(spec):
        kind, host, port, nonce = spec.split("|")
        port = int(port)
        name = nonce + ".marker.test"
        if kind in ("dns-udp", "dns-tcp"):
            r, err = ask(host, name, 1, kind == "dns-tcp", timeout=5, port=port)
            results[spec] = "rcode %d" % r[0] if r else err
        elif kind == "https":
            text, err = https_exchange(host, port, name, "GET /" + nonce + " HTTP/1.1", name)
            results[spec] = "reply %d bytes" % len(text) if text is not None else err
        else:
            payload = {
                "http": "GET /%s HTTP/1.0\r\nHost: %s\r\n\r\n" % (nonce, name),
                "proxy": "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (name, name),
            }.get(kind, nonce + "\n")
            results[spec] = send("udp" if kind == "udp" else "tcp", host, port, payload.encode(), timeout=5)[0]
    threads = [threading.Thread(target=one, args=(s,)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for spec in specs:
        print("mark %s: %s" % (spec, results.get(spec)))
    return 0

def now_ms():
    import time
    return int(time.time() * 1000)

def cmd_hold(kind, host, port, name, nonce):
    """Holds one connection open and keeps using it: tcp sends a line to an
    echo, tls sends an HTTPS request on a kept-alive connection to name.
    Prints "open" after the first answer, then "ok MS" for each answer
    every 100 ms and, when one does not come, "cut MS why" and exits 0;
    MS is the time in milliseconds."""
    import ssl, time
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
        if kind == "tls":
            ctx = ssl.create_default_context(cafile="./ca.pem")
            s = ctx.wrap_socket(s, server_hostname=name)
    except OSError as e:
        print("cannot open: %s" % err_name(e), flush=True)
        return 1
    s.settimeout(1)
    buf = b""
    i = 0
    while True:
        i += 1
        tag = "%s-%d" % (nonce, i)
        if kind == "tls":
            msg = "GET /%s HTTP/1.1\r\nHost: %s\r\n\r\n" % (tag, name)
            want = ("path /%s\n" % tag).encode()
        else:
            msg = tag + "\n"
            want = msg.encode()
        why = None
        try:
            s.sendall(msg.encode())
            while want not in buf:
                b = s.recv(4096)
                if not b:
                    why = "closed"
                    break
                buf += b
        except OSError as e:
            why = err_name(e)
        if why is not None:
            print("cut %d %s" % (now_ms(), why), flush=True)
            return 0
        buf = buf[buf.index(want) + len(want):]
        print(("open" if i == 1 else "ok %d" % now_ms()), flush=True)
        time.sleep(0.1)

def cmd_ll6(port, payload):
    """UDP to every node on the session link (IPv6 link-local multicast)."""
    try:
        idx = socket.if_nametoindex("eth0")
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    except OSError as e:
        print("no IPv6: %s" % err_name(e))
        return 1
    sent = False
    for dst in ("ff02::1", "ff02::2"):
        try:
            s.sendto((payload + "\n").encode(), (dst, int(port), 0, idx))
            print("sent to %s%%eth0 port %s" % (dst, port))
            sent = True
        except OSError as e:
            print("%s%%eth0: %s" % (dst, err_name(e)))
    return 0 if sent else 1

def cmd_rawsock():
    ok = False
    for name, fam, typ, proto in (("AF_INET/SOCK_RAW/UDP", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP),
                                  ("AF_INET/SOCK_RAW/ICMP", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                                  ("AF_PACKET/SOCK_RAW", socket.AF_PACKET, socket.SOCK_RAW, 0x0300)):
        try:
            socket.socket(fam, typ, proto).close()
            print("%s: opened" % name)
            ok = True
        except OSError as e:
            print("%s: %s" % (name, err_name(e)))
    return 0 if ok else 1

TUNSETIFF = 0x400454CA

def cmd_tun():
    import fcntl
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR)
    except OSError as e:
        print("open /dev/net/tun: %s" % err_name(e))
        return 1
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", b"asbtun%d", 0x0001 | 0x1000))
        print("TUNSETIFF: created a tun device")
        return 0
    except OSError as e:
        print("TUNSETIFF: %s" % err_name(e))
        return 1

def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF

def cmd_rawsend(dst, port, payload):
    """A hand-built IPv4/UDP packet on a raw socket; exit 0 if it was sent."""
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    except OSError as e:
        print("raw socket: %s" % err_name(e))
        return 1
    data = (payload + "\n").encode()
    udp = struct.pack("!HHHH", 40000, int(port), 8 + len(data), 0) + data
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton("0.0.0.0"), socket.inet_aton(dst))
    try:
        s.sendto(ip + udp, (dst, 0))
    except OSError as e:
        print("raw send to %s: %s" % (dst, err_name(e)))
        return 1
    print("raw packet of %d bytes sent to %s" % (len(ip + udp), dst))
    return 0

def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    fn = globals().get("cmd_" + cmd)
    if fn is None:
        print("unknown command " + cmd)
        return 2
    return fn(*args)

if __name__ == "__main__":
    sys.exit(main())
`
