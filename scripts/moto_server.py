"""moto server for the local stack, with DynamoDB's per-item atomicity.

Real DynamoDB applies each conditional write atomically. moto evaluates the
condition and applies an UpdateItem in separate Python steps on a threaded
server, so two concurrent conditional updates of one item can both succeed
(50 racing claims gave 3 winners). This launcher serves moto exactly like
`moto_server`, but runs DynamoDB requests one at a time. Other services
(SQS long polls in particular) stay concurrent.

It also makes moto's TransactWriteItems cost what the transaction touches.
moto snapshots every table a transaction names with `copy.deepcopy` (stream
records included) so that it can roll back, which makes each transaction
O(table) and a 200-operation benchmark time out. Here a transaction saves
only the items it names and the stream's length, and a cancelled one puts
exactly those back. The contract tests check the rollback (a claim refused
by the spend limit leaves the record and the ledger as they were).

usage: python moto_server.py HOST PORT

With MOTO_TIMINGS set to a file's path, each DynamoDB request's target and
duration (ms) are appended to it, one line each.
"""

import os
import signal
import sys
import time
import threading

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

_dynamodb = threading.Lock()


def _cheap_transactions() -> None:
    import copy

    import moto.dynamodb.models as models
    from moto.dynamodb.models.table import Table

    class _NoTableCopies:
        """`copy` for moto's DynamoDB backend module, minus table snapshots."""

        def __getattr__(self, name):
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value, memo=None):
            if isinstance(value, Table):
                return value
            return copy.deepcopy(value, memo)

    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        saved, streams = [], {}
        for entry in transact_items:
            try:
                op_type, op = next(iter(entry.items()))
                name = op["TableName"]
                table = self.get_table(name)
                if op_type == "Put":
                    key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = op["Item"][table.range_key_attr]
                else:
                    key = op["Key"]
                current = self.get_item(name, key)
            except Exception:  # the original reports malformed requests
                continue
            saved.append((name, key, copy.deepcopy(current) if current else None))
            shard = getattr(table, "stream_shard", None)
            if shard is not None and name not in streams:
                streams[name] = (shard, len(shard.items))
        real, models.copy = models.copy, _NoTableCopies()
        try:
            return original(self, transact_items)
        except Exception:
            for name, key, item in reversed(saved):
                if item is None:
                    self.delete_item(name, key)
                else:
                    self.put_item(name, item.to_json()["Attributes"])
            for shard, length in streams.values():
                del shard.items[length:]
            raise
        finally:
            models.copy = real

    models.DynamoDBBackend.transact_write_items = transact_write_items


def _lean_hot_paths() -> None:
    """Takes per-request costs out of moto that only an emulator pays.

    With a thousand messages in flight, a server that also answers DynamoDB
    spent most of its one core (Python runs one thread at a time) outside
    the requests' own work: each SQS receive read the queue's every
    attribute once per message to learn its retention period, every
    message's visibility check built two datetimes to read the clock, every
    request listed moto's package directory to find its backend, and every
    request was logged to the console. The answers are unchanged.
    """
    import logging

    import moto.backends as backends
    import moto.sqs.models as sqs

    def unix_time(dt=None):
        return time.time() if dt is None else _unix_time(dt)

    def unix_time_millis(dt=None):
        return unix_time(dt) * 1000.0

    _unix_time = sqs.unix_time
    sqs.unix_time, sqs.unix_time_millis = unix_time, unix_time_millis

    def is_message_valid_based_on_retention_period(self, queue_name, message):
        retention = int(self.get_queue(queue_name).message_retention_period)
        return retention + message.sent_timestamp / 1000 > time.time()

    sqs.SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    logging.getLogger("werkzeug").setLevel(logging.WARNING)


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    _cheap_transactions()
    _lean_hot_paths()
    moto_app = DomainDispatcherApplication(create_backend_app)

    timings = os.environ.get("MOTO_TIMINGS")
    out = open(timings, "a", buffering=1) if timings else None

    def app(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with _dynamodb:
                # Produce the whole response while holding the lock.
                started = time.monotonic()
                answer = list(moto_app(environ, start_response))
                if out:
                    took = (time.monotonic() - started) * 1000
                    out.write(f"{environ['HTTP_X_AMZ_TARGET']} {took:.2f}\n")
                return answer
        return moto_app(environ, start_response)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(host, port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
