"""A small FastAPI service on SQLite, written the way the framework's tutorial writes one, for
`harness audit` (harness/tests/audit_fastapi.rs). Its OpenAPI document is FastAPI's own, served at
/openapi.json: every answer is documented as `schema: {}` and no creation sends a Location header,
so where an id is must be read from the answers themselves.

- accounts: `POST /accounts` answers 201 with `{"id": "acc-…", …}` (a plain INSERT: a client's retry
  after a lost answer makes a second account); `PATCH`, `PUT` and `DELETE /accounts/{account_id}`,
  the PATCH declaring an example for the parameter (`acc-demo`, no such account) as FastAPI users do;
- transfers: `POST /transfers` answers `{"transfer_id": "tr-…", …}` (a transfer's `reference` is its
  natural key: a repeat answers 200 with the transfer already made); `DELETE /transfers/{id}`;
- webhooks: `POST /webhooks` answers 202 `{"status": "queued"}` and names nothing (registration is
  confirmed later), so only a parameter's example can name one: `PATCH /webhooks/{webhook_id}`
  declares `wh-default` and `DELETE /webhooks/{webhook_id}` declares `wh-old`, webhooks the service
  starts with; `POST /webhooks/{webhook_id}/pings` declares `wh-retired`, which does not exist;
  `PUT /webhooks/{webhook_id}/secret` declares nothing.

Usage: python accounts.py --bind 127.0.0.1:0   (prints `listening on http://127.0.0.1:PORT`)
"""

import argparse
import secrets
import socket
import sqlite3
import sys
import threading
from typing import Annotated, Optional

import uvicorn
from fastapi import FastAPI, HTTPException, Path, Response
from pydantic import BaseModel, Field

app = FastAPI(title="accounts", version="1.0")
db = sqlite3.connect(":memory:", check_same_thread=False)
lock = threading.Lock()
db.executescript(
    """
    CREATE TABLE accounts (id TEXT PRIMARY KEY, owner TEXT NOT NULL, currency TEXT NOT NULL);
    CREATE TABLE transfers (id TEXT PRIMARY KEY, reference TEXT NOT NULL UNIQUE,
                            from_account TEXT NOT NULL, amount INTEGER NOT NULL);
    CREATE TABLE webhooks (id TEXT PRIMARY KEY, url TEXT NOT NULL);
    INSERT INTO webhooks VALUES ('wh-default', 'https://example.com/hook'),
                                ('wh-old', 'https://example.com/old');
    """
)


class NewAccount(BaseModel):
    owner: str = Field(min_length=1, max_length=40)
    currency: str = Field(default="EUR", pattern="^[A-Z]{3}$")


class AccountPatch(BaseModel):
    owner: Optional[str] = Field(default=None, min_length=1, max_length=40)


class NewTransfer(BaseModel):
    reference: str = Field(min_length=1, max_length=40)
    from_account: str = Field(min_length=1, max_length=40)
    amount: int = Field(gt=0, le=1_000_000)


class NewWebhook(BaseModel):
    url: str = Field(min_length=1, max_length=200)


def account(row):
    if row is None:
        raise HTTPException(status_code=404, detail="account not found")
    return {"id": row[0], "owner": row[1], "currency": row[2]}


@app.post("/accounts", status_code=201, operation_id="createAccount")
def create_account(body: NewAccount):
    with lock:
        new_id = "acc-" + secrets.token_hex(6)
        db.execute("INSERT INTO accounts VALUES (?, ?, ?)", (new_id, body.owner, body.currency))
        db.commit()
    return {"id": new_id, "owner": body.owner, "currency": body.currency}


@app.get("/accounts", operation_id="listAccounts")
def list_accounts():
    with lock:
        rows = db.execute("SELECT id, owner, currency FROM accounts ORDER BY id").fetchall()
    return [account(r) for r in rows]


@app.get("/accounts/{account_id}", operation_id="getAccount")
def get_account(account_id: str):
    with lock:
        row = db.execute(
            "SELECT id, owner, currency FROM accounts WHERE id = ?", (account_id,)
        ).fetchone()
    return account(row)


@app.patch("/accounts/{account_id}", operation_id="updateAccount")
def update_account(
    account_id: Annotated[str, Path(examples=["acc-demo"])], body: AccountPatch
):
    with lock:
        if body.owner is not None:
            db.execute("UPDATE accounts SET owner = ? WHERE id = ?", (body.owner, account_id))
            db.commit()
        row = db.execute(
            "SELECT id, owner, currency FROM accounts WHERE id = ?", (account_id,)
        ).fetchone()
    return account(row)


@app.put("/accounts/{account_id}", operation_id="replaceAccount")
def replace_account(account_id: str, body: NewAccount):
    with lock:
        changed = db.execute(
            "UPDATE accounts SET owner = ?, currency = ? WHERE id = ?",
            (body.owner, body.currency, account_id),
        ).rowcount
        db.commit()
    if changed == 0:
        raise HTTPException(status_code=404, detail="account not found")
    return {"id": account_id, "owner": body.owner, "currency": body.currency}


@app.delete("/accounts/{account_id}", status_code=204, operation_id="deleteAccount")
def delete_account(account_id: str):
    with lock:
        gone = db.execute("DELETE FROM accounts WHERE id = ?", (account_id,)).rowcount
        db.commit()
    if gone == 0:
        raise HTTPException(status_code=404, detail="account not found")
    return Response(status_code=204)


@app.post("/transfers", status_code=201, operation_id="createTransfer")
def create_transfer(body: NewTransfer, response: Response):
    with lock:
        row = db.execute(
            "SELECT id FROM transfers WHERE reference = ?", (body.reference,)
        ).fetchone()
        if row is not None:
            response.status_code = 200
            new_id = row[0]
        else:
            new_id = "tr-" + secrets.token_hex(6)
            db.execute(
                "INSERT INTO transfers VALUES (?, ?, ?, ?)",
                (new_id, body.reference, body.from_account, body.amount),
            )
            db.commit()
    return {"transfer_id": new_id, "reference": body.reference, "status": "pending"}


@app.delete("/transfers/{id}", status_code=204, operation_id="cancelTransfer")
def cancel_transfer(id: str):
    with lock:
        gone = db.execute("DELETE FROM transfers WHERE id = ?", (id,)).rowcount
        db.commit()
    if gone == 0:
        raise HTTPException(status_code=404, detail="transfer not found")
    return Response(status_code=204)


@app.post("/webhooks", status_code=202, operation_id="createWebhook")
def create_webhook(body: NewWebhook):
    return {"status": "queued"}


def webhook(webhook_id):
    row = db.execute("SELECT id, url FROM webhooks WHERE id = ?", (webhook_id,)).fetchone()
    if row is None:
        raise HTTPException(status_code=404, detail="webhook not found")
    return {"id": row[0], "url": row[1]}


@app.patch("/webhooks/{webhook_id}", operation_id="updateWebhook")
def update_webhook(webhook_id: Annotated[str, Path(examples=["wh-default"])], body: NewWebhook):
    with lock:
        db.execute("UPDATE webhooks SET url = ? WHERE id = ?", (body.url, webhook_id))
        db.commit()
        return webhook(webhook_id)


@app.post("/webhooks/{webhook_id}/pings", operation_id="pingWebhook")
def ping_webhook(webhook_id: Annotated[str, Path(examples=["wh-retired"])]):
    with lock:
        return {"pinged": webhook(webhook_id)["id"]}


@app.put("/webhooks/{webhook_id}/secret", operation_id="rotateWebhookSecret")
def rotate_webhook_secret(webhook_id: str):
    with lock:
        return {"webhook": webhook(webhook_id)["id"], "secret": "whsec_" + secrets.token_hex(8)}


@app.delete("/webhooks/{webhook_id}", status_code=204, operation_id="deleteWebhook")
def delete_webhook(webhook_id: Annotated[str, Path(examples=["wh-old"])]):
    with lock:
        gone = db.execute("DELETE FROM webhooks WHERE id = ?", (webhook_id,)).rowcount
        db.commit()
    if gone == 0:
        raise HTTPException(status_code=404, detail="webhook not found")
    return Response(status_code=204)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="127.0.0.1:0", help="HOST:PORT (port 0: any free one)")
    args = parser.parse_args()
    host, _, port = args.bind.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    print(f"listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
