"""A client of the shop's price service (reached as http://api:8080 from the sandbox)."""

import json
import urllib.request

BASE = "http://api:8080"


def price(item):
    """The price of one item, in cents, as the service reports it."""
    with urllib.request.urlopen(f"{BASE}/price/{item}", timeout=5) as reply:
        return json.load(reply)["cents"]


def total(items):
    """The price of a basket, in cents."""
    return sum(price(item) for item in items[1:])
