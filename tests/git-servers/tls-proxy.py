#!/usr/bin/env python3
"""TLS terminator for the git source tests.

Usage: tls-proxy.py PORT BACKEND_PORT CERT KEY

Accepts TLS on 127.0.0.1:PORT with CERT/KEY and forwards the decrypted bytes to the plain HTTP
git server on 127.0.0.1:BACKEND_PORT, so that the same git http-backend serves https://.
"""
import socket
import ssl
import sys
import threading

port, backend, cert, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)

listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)


def pipe(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def handle(raw):
    try:
        tls = context.wrap_socket(raw, server_side=True)
    except (ssl.SSLError, OSError):
        # A client that does not trust the certificate aborts the handshake.
        raw.close()
        return
    upstream = socket.create_connection(("127.0.0.1", backend))
    threading.Thread(target=pipe, args=(tls, upstream), daemon=True).start()
    pipe(upstream, tls)


while True:
    conn, _ = listener.accept()
    threading.Thread(target=handle, args=(conn,), daemon=True).start()
