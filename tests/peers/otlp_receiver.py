"""An OTLP/HTTP trace receiver for systole's tests, built on the OpenTelemetry project's
own protobuf definitions (`opentelemetry-proto` on PyPI).

Each `POST /v1/traces` (JSON encoding) is parsed strictly into an
`ExportTraceServiceRequest`: an unknown field, a wrong type or a malformed id is refused
with 400, as a collector would. Ids are hex in OTLP's JSON (not base64 as in protobuf's
JSON mapping), so they are checked and converted first. Every span received is written
as one JSON line to SPANS_FILE: trace id, span id, parent id, name, kind and attributes.

    python3 otlp_receiver.py PORT_FILE SPANS_FILE    # binds 127.0.0.1:0, writes the port
"""

import base64
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

ID_HEX_CHARS = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def hex_ids_to_base64(value):
    """OTLP/JSON writes ids as hex; protobuf's JSON parser reads bytes as base64."""
    if isinstance(value, dict):
        converted = {}
        for key, item in value.items():
            if key in ID_HEX_CHARS and isinstance(item, str):
                if len(item) != ID_HEX_CHARS[key]:
                    raise ValueError(f"{key} {item!r} is not {ID_HEX_CHARS[key]} hex characters")
                converted[key] = base64.b64encode(bytes.fromhex(item)).decode()
            else:
                converted[key] = hex_ids_to_base64(item)
        return converted
    if isinstance(value, list):
        return [hex_ids_to_base64(item) for item in value]
    return value


def attribute_value(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Receiver(BaseHTTPRequestHandler):
    spans_file = None

    def do_POST(self):
        if self.path != "/v1/traces":
            self.send_error(404)
            return
        if not self.headers.get("Content-Type", "").startswith("application/json"):
            self.send_error(415, "only the JSON encoding is accepted here")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        try:
            json_format.ParseDict(hex_ids_to_base64(json.loads(body)), request)
        except (ValueError, json_format.ParseError) as error:
            self.send_error(400, str(error)[:200])
            return
        with open(self.spans_file, "a", encoding="utf-8") as out:
            for resource in request.resource_spans:
                service = {a.key: attribute_value(a.value) for a in resource.resource.attributes}
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        out.write(json.dumps({
                            # The hosted backends' kind of key, as this request carried it.
                            "api_key": self.headers.get("x-otlp-api-key"),
                            "service": service.get("service.name"),
                            "schema_url": scope.schema_url,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": span.kind,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "status": span.status.code,
                            "attributes": {a.key: attribute_value(a.value) for a in span.attributes},
                        }) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format, *args):
        pass


def main():
    port_file, spans_file = sys.argv[1], sys.argv[2]
    Receiver.spans_file = spans_file
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    with open(port_file + ".tmp", "w", encoding="utf-8") as out:
        out.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
