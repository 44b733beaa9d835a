"""Public path of the erasure receipts (:class:`Receipt` and friends): they live in
:mod:`refold.storage.erasure.receipts`, the erasure's last step; this name stays for callers."""

from __future__ import annotations

from .erasure.receipts import (Receipt, ReceiptReport, list_receipts, load_receipt, receipt_path,
                               verify_receipt)

__all__ = ["Receipt", "ReceiptReport", "list_receipts", "load_receipt", "receipt_path", "verify_receipt"]
