"""CURVE keys: the files `troupe keygen` writes, and a socket set up with them."""
import zmq


def read_key_file(path):
    """The fields of a `troupe keygen` file (NAME.key or NAME.secret) as a dict."""
    fields = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                name, value = line.split("=", 1)
                fields[name.strip()] = value.strip()
    if "public-key" not in fields:
        raise ValueError(f"{path}: no public-key line")
    return fields


def _use_curve(sock, client_key, server_key):
    """CURVE on a client socket: client_key is its .secret file, server_key the server's .key."""
    if client_key is None and server_key is None:
        return
    if client_key is None or server_key is None:
        raise ValueError("a server under CURVE needs both client_key (your .secret) and server_key (its .key)")
    mine = read_key_file(client_key)
    if "secret-key" not in mine:
        raise ValueError(f"{client_key}: no secret-key line (give the .secret file)")
    sock.setsockopt(zmq.CURVE_SERVERKEY, read_key_file(server_key)["public-key"].encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, mine["public-key"].encode())
    sock.setsockopt(zmq.CURVE_SECRETKEY, mine["secret-key"].encode())
