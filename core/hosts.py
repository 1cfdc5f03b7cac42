"""Addresses that only this machine reaches: listening anywhere else needs a login or a key."""

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def is_local(host: str) -> bool:
    return host in LOCAL_HOSTS
