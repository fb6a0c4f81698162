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
"""

import signal
import sys
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


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    _cheap_transactions()
    moto_app = DomainDispatcherApplication(create_backend_app)

    def app(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with _dynamodb:
                # Produce the whole response while holding the lock.
                return list(moto_app(environ, start_response))
        return moto_app(environ, start_response)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(host, port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
