"""A webhook receiver's checks, written with the `standardwebhooks` package
from PyPI rather than with this project's code.

Reads a JSON file {"secrets": [...], "posts": [{"headers": {...}, "body": "..."}]}.
Every POST must verify under every secret given (a secret rotated within
the overlap is one of them). A tampered body and a timestamp older than the
library's tolerance must be refused. Exits non-zero, saying why, otherwise.
"""

import json
import sys
from datetime import datetime, timedelta, timezone

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def refused(hook, body, headers):
    try:
        hook.verify(body, headers)
    except WebhookVerificationError:
        return True
    return False


def main(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    posts = data["posts"]
    if not posts:
        sys.exit("no POSTs to verify")
    for secret in data["secrets"]:
        hook = Webhook(secret)
        for post in posts:
            hook.verify(post["body"], post["headers"])
        first = posts[0]
        if not refused(hook, first["body"].replace("operation", "0peration", 1), first["headers"]):
            sys.exit("a tampered body verified")
        old = datetime.now(timezone.utc) - timedelta(minutes=10)
        stale = dict(first["headers"])
        stale["webhook-timestamp"] = str(int(old.timestamp()))
        stale["webhook-signature"] = hook.sign(stale["webhook-id"], old, first["body"])
        if not refused(hook, first["body"], stale):
            sys.exit("a POST signed ten minutes ago verified")
    print(f"verified {len(posts)} POSTs under {len(data['secrets'])} secret(s); refused a tampered body and an old timestamp")


if __name__ == "__main__":
    main(sys.argv[1])
