"""Serve a logged model over REST: MLflow's scoring server (the app `mlflow models serve
--env-manager local` runs: /invocations, /ping, /health, /version), with every 4xx answer cut
to one line that carries none of the request's text.

    python -m textclf.serve models:/textclf@champion --port 5001

MLflow's own refusals (a body that is not JSON, a request without the `text` column) quote the
request back, over several lines, into answers, proxies and logs. The model's own refusals
(empty text, a non-string value, a request over the limits) are one line already. MLflow turns
every value of the `inputs` (and `instances`) format into a string before the model sees it
(3 becomes "3", null "None"): those requests are checked here, before MLflow reads them.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from textclf.inference.frames import check_strings
from textclf.inference.serving import REFUSED, TEXT_COLUMN
from textclf.errors import UserError

MODEL_ENV = "TEXTCLF_SERVE_MODEL"  # how each uvicorn worker learns the model URI
FORMAT = ('send JSON such as {"dataframe_split": {"columns": ["text"], "data": [["one text"]]}} '
          "with Content-Type: application/json")
# MLflow's error classes -> what was wrong, in our words; anything else gets the generic line
DEEP = f"the request body nests too deep to be read as JSON: {FORMAT}."
REASONS = {"SCHEMA_ENFORCEMENT_FAILED": "the request does not have the model's input, one string "
                                        "column named 'text'"}
log = logging.getLogger("textclf.serve")  # not __main__ under python -m


def one_line(answer: dict) -> dict:
    """A 4xx answer's JSON -> the same answer with a one-line message and no request text."""
    kept = {k: answer[k] for k in ("error_code", "error_class", "sqlstate") if k in answer}
    message = str(answer.get("message", ""))
    if answer.get("error_class") == REFUSED:
        return {**kept, "message": message}  # no stack_trace: it names the server's files
    if "valid JSON" in message or "UTF-8" in message:
        reason = "the request body is not valid JSON in UTF-8"
    else:
        reason = REASONS.get(str(answer.get("error_class")), "the request is not in the scoring format")
    return {**kept, "message": f"{reason}: {FORMAT}."}


def tensor_texts(body: object) -> list:
    """The rows of an `inputs` / `instances` request as sent, before MLflow makes strings of
    them: a list of values or of {"text": value} records, or {"text": value or [values]}.
    Any other shape -> [] (MLflow refuses it: not the scoring format, or no `text` column)."""
    if not isinstance(body, dict):
        return []
    value = body.get("inputs", body.get("instances"))
    if isinstance(value, dict):
        value = value.get(TEXT_COLUMN, [])
        return value if isinstance(value, list) else [value]
    if not isinstance(value, list):
        return []
    records = [v for v in value if isinstance(v, dict)]
    if not records:
        return value
    if len(records) < len(value) or any(TEXT_COLUMN not in r for r in records):
        return []
    return [r[TEXT_COLUMN] for r in records]


async def check_tensor_input(request) -> None:
    """Refuse (UserError) an /invocations JSON body in the `inputs` format holding a value that is
    not a string. A body that is not JSON in UTF-8 is left to MLflow, which refuses it."""
    if request.url.path != "/invocations" or request.headers.get(
            "content-type", "").split(";")[0].strip() != "application/json":
        return
    try:
        body = json.loads(await request.body())  # Starlette hands the read body on to MLflow
    except ValueError:
        return
    check_strings(tensor_texts(body))


def build_app():
    """The scoring app for the model in $TEXTCLF_SERVE_MODEL (a uvicorn factory)."""
    import mlflow
    from fastapi import Request
    from fastapi.responses import Response
    from mlflow.pyfunc import scoring_server

    app = scoring_server.init(mlflow.pyfunc.load_model(os.environ[MODEL_ENV]))

    @app.middleware("http")
    async def refusals_in_one_line(request: Request, call_next):
        try:
            await check_tensor_input(request)
            response = await call_next(request)
        except RecursionError:  # json.loads of a body nested thousands deep; the server is fine
            return Response(json.dumps({"error_code": "BAD_REQUEST", "message": DEEP}), 400,
                            media_type="application/json")
        except UserError as err:  # the model's own refusal of a non-string in the other formats
            return Response(json.dumps({"error_code": "INVALID_PARAMETER_VALUE", "error_class": REFUSED,
                                        "message": str(err)}), 400, media_type="application/json")
        if not 400 <= response.status_code < 500:
            return response
        body = b"".join([chunk async for chunk in response.body_iterator])
        try:
            answer = json.loads(body)
        except ValueError:  # text/plain (415: not JSON); MLflow's own lines, no request text
            return Response(body, response.status_code, media_type=response.media_type)
        return Response(json.dumps(one_line(answer)), response.status_code,
                        media_type="application/json")

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_uri", help="models:/NAME@ALIAS, runs:/ID/model or a model folder URI")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers, each loads the model")
    args = parser.parse_args(argv)
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from textclf.inference.model_uri import model_folder, pyfunc_folder  # mlflow, not torch: the workers load that
    from textclf.model.checksums import verify_folder

    try:  # once, before the workers start: a bad model is one line, not a traceback per worker
        local = pyfunc_folder(args.model_uri)
        verify_folder(model_folder(str(local)))  # a damaged file too (each worker checks again)
    except UserError as err:
        log.error("%s", err)
        sys.exit(1)
    os.environ[MODEL_ENV] = str(local)
    log.info("serving %s (%s) on http://%s:%d", args.model_uri, local, args.host, args.port)
    uvicorn.run("textclf.serve:build_app", factory=True, host=args.host, port=args.port,
                workers=args.workers)


if __name__ == "__main__":
    main()
