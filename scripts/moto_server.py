"""moto server for the local stack, with DynamoDB's per-item atomicity.

Real DynamoDB applies each conditional write atomically. moto evaluates the
condition and applies an UpdateItem in separate Python steps on a threaded
server, so two concurrent conditional updates of one item can both succeed
(50 racing claims gave 3 winners). This launcher serves moto exactly like
`moto_server`, but runs DynamoDB requests one at a time. Other services
(SQS long polls in particular) stay concurrent.

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


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
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
