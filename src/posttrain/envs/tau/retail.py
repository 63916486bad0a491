"""The ``retail`` domain's agent tools (TAU_ENV.md §5): look up users, orders and products;
cancel or modify pending orders; exchange or return delivered ones. Each tool looks up its
order (or user) first, then applies its checks in the listed order — the first failing check
decides the error message."""

from __future__ import annotations

import json
from collections import Counter

from posttrain.envs.tau.db import data_dir, load_db
from posttrain.envs.tau.retail_db import (
    Address,
    GiftCard,
    Order,
    Payment,
    PaymentMethod,
    Product,
    RetailDB,
    RetailUser,
    Variant,
)
from posttrain.envs.tau.toolkit import GENERIC, READ, WRITE, DomainError, Toolkit, ToolSpec

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
CALC_CHARS = set("0123456789+-*/(). ")


def pristine() -> RetailDB:
    return load_db(RetailDB, data_dir("retail") / "db.json")


class RetailTools:
    def __init__(self, db: RetailDB) -> None:
        self.db = db

    # -- lookups ---------------------------------------------------------------------------
    def _order(self, order_id: str) -> Order:
        if order_id not in self.db.orders:
            raise DomainError("Order not found")
        return self.db.orders[order_id]

    def _user(self, user_id: str) -> RetailUser:
        if user_id not in self.db.users:
            raise DomainError("User not found")
        return self.db.users[user_id]

    def _product(self, product_id: str) -> Product:
        if product_id not in self.db.products:
            raise DomainError("Product not found")
        return self.db.products[product_id]

    def _variant(self, product_id: str, item_id: str) -> Variant:
        variants = self._product(product_id).variants
        if item_id not in variants:
            raise DomainError("Variant not found")
        return variants[item_id]

    def _method(self, order: Order, method_id: str) -> PaymentMethod:
        methods = self._user(order.user_id).payment_methods
        if method_id not in methods:
            raise DomainError("Payment method not found")
        return methods[method_id]

    @staticmethod
    def _first_missing(order: Order, item_ids: list[str]) -> str | None:
        """The first requested id asked for more often than the order holds it."""
        held, asked = Counter(i.item_id for i in order.items), Counter(item_ids)
        return next((i for i in item_ids if asked[i] > held[i]), None)

    def _pairs(self, order: Order, item_ids: list[str], new_item_ids: list[str],
               distinct: bool) -> tuple[float, list[Variant]]:
        """The price difference of exchanging ``item_ids`` for ``new_item_ids`` (unrounded,
        from integer 0) and the new variants, checking each pair."""
        diff, variants = 0, []
        for old, new in zip(item_ids, new_item_ids):
            if distinct and old == new:
                raise DomainError("The new item id should be different from the old item id")
            item = next((i for i in order.items if i.item_id == old), None)
            if item is None:
                raise DomainError(f"Item {old} not found")
            variant = self._variant(item.product_id, new)
            if not variant.available:
                raise DomainError(f"New item {new} not found or available")
            diff += variant.price - item.price
            variants.append(variant)
        return diff, variants

    # -- read ------------------------------------------------------------------------------
    def calculate(self, expression: str) -> str:
        if not set(expression) <= CALC_CHARS:
            raise DomainError("Invalid characters in expression")
        value = eval(expression, {"__builtins__": {}}, {})  # digits and operators only
        return str(round(float(value), 2))

    def find_user_id_by_email(self, email: str) -> str:
        for user_id, user in self.db.users.items():
            if user.email.lower() == email.lower():
                return user_id
        raise DomainError("User not found")

    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        for user_id, user in self.db.users.items():
            if (user.name.first_name.lower() == first_name.lower()
                    and user.name.last_name.lower() == last_name.lower()
                    and user.address.zip == zip):
                return user_id
        raise DomainError("User not found")

    def get_order_details(self, order_id: str) -> Order:
        return self._order(order_id)

    def get_product_details(self, product_id: str) -> Product:
        return self._product(product_id)

    def get_user_details(self, user_id: str) -> RetailUser:
        return self._user(user_id)

    def get_item_details(self, item_id: str) -> Variant:
        for product in self.db.products.values():
            if item_id in product.variants:
                return product.variants[item_id]
        raise DomainError("Item not found")

    def list_all_product_types(self) -> str:
        return json.dumps({p.name: p.product_id for p in self.db.products.values()},
                          sort_keys=True)

    def transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"

    # -- write -----------------------------------------------------------------------------
    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        order = self._order(order_id)
        if order.status != "pending":
            raise DomainError("Non-pending order cannot be cancelled")
        if reason not in CANCEL_REASONS:
            raise DomainError("Invalid reason")
        refunds = []
        for entry in order.payment_history:
            refunds.append(Payment(transaction_type="refund", amount=entry.amount,
                                   payment_method_id=entry.payment_method_id))
            method = self._method(order, entry.payment_method_id)
            if isinstance(method, GiftCard):
                method.balance = round(method.balance + entry.amount, 2)
        order.status, order.cancel_reason = "cancelled", reason
        order.payment_history.extend(refunds)
        return order

    def modify_pending_order_address(self, order_id: str, address1: str, address2: str,
                                     city: str, state: str, country: str, zip: str) -> Order:
        order = self._order(order_id)
        if "pending" not in order.status:
            raise DomainError("Non-pending order cannot be modified")
        order.address = Address(address1=address1, address2=address2, city=city,
                                country=country, state=state, zip=zip)
        return order

    def modify_user_address(self, user_id: str, address1: str, address2: str, city: str,
                            state: str, country: str, zip: str) -> RetailUser:
        user = self._user(user_id)
        user.address = Address(address1=address1, address2=address2, city=city,
                               country=country, state=state, zip=zip)
        return user

    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Order:
        order = self._order(order_id)
        if "pending" not in order.status:
            raise DomainError("Non-pending order cannot be modified")
        new = self._method(order, payment_method_id)
        history = order.payment_history
        if len(history) != 1 or history[0].transaction_type != "payment":
            raise DomainError("There should be exactly one payment for a pending order")
        old_id, amount = history[0].payment_method_id, history[0].amount
        if old_id == payment_method_id:
            raise DomainError("The new payment method should be different from the current one")
        if isinstance(new, GiftCard) and new.balance < amount:
            raise DomainError("Insufficient gift card balance to pay for the order")
        history.append(Payment(transaction_type="payment", amount=amount,
                               payment_method_id=payment_method_id))
        history.append(Payment(transaction_type="refund", amount=amount,
                               payment_method_id=old_id))
        if isinstance(new, GiftCard):
            new.balance = round(new.balance - amount, 2)
        old = self._method(order, old_id)
        if isinstance(old, GiftCard):
            old.balance = round(old.balance + amount, 2)
        return order

    def modify_pending_order_items(self, order_id: str, item_ids: list[str],
                                   new_item_ids: list[str], payment_method_id: str) -> Order:
        order = self._order(order_id)
        if order.status != "pending":
            raise DomainError("Non-pending order cannot be modified")
        missing = self._first_missing(order, item_ids)
        if missing is not None:
            raise DomainError(f"{missing} not found")
        if len(item_ids) != len(new_item_ids):
            raise DomainError("The number of items to be exchanged should match")
        diff, variants = self._pairs(order, item_ids, new_item_ids, distinct=True)
        method = self._method(order, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff:
            raise DomainError("Insufficient gift card balance to pay for the new item")
        order.payment_history.append(Payment(
            transaction_type="payment" if diff > 0 else "refund", amount=abs(diff),
            payment_method_id=payment_method_id))
        if isinstance(method, GiftCard):
            method.balance = round(method.balance - diff, 2)
        last = variants[-1] if variants else None
        for old, new in zip(item_ids, new_item_ids):
            item = next(i for i in order.items if i.item_id == old)
            item.item_id = new
            item.price, item.options = last.price, dict(last.options)  # tau2: the LAST pair's
        order.status = "pending (item modified)"
        return order

    def exchange_delivered_order_items(self, order_id: str, item_ids: list[str],
                                       new_item_ids: list[str], payment_method_id: str
                                       ) -> Order:
        order = self._order(order_id)
        if order.status != "delivered":
            raise DomainError("Non-delivered order cannot be exchanged")
        missing = self._first_missing(order, item_ids)
        if missing is not None:
            raise DomainError(f"Number of {missing} not found.")
        if len(item_ids) != len(new_item_ids):
            raise DomainError("The number of items to be exchanged should match.")
        diff, _ = self._pairs(order, item_ids, new_item_ids, distinct=False)
        diff = round(diff, 2)
        method = self._method(order, payment_method_id)
        if isinstance(method, GiftCard) and method.balance < diff:
            raise DomainError("Insufficient gift card balance to pay for the price difference")
        order.status = "exchange requested"
        order.exchange_items, order.exchange_new_items = sorted(item_ids), sorted(new_item_ids)
        order.exchange_payment_method_id = payment_method_id
        order.exchange_price_difference = diff
        return order

    def return_delivered_order_items(self, order_id: str, item_ids: list[str],
                                     payment_method_id: str) -> Order:
        order = self._order(order_id)
        if order.status != "delivered":
            raise DomainError("Non-delivered order cannot be returned")
        method = self._method(order, payment_method_id)
        if not isinstance(method, GiftCard) and (
                payment_method_id != order.payment_history[0].payment_method_id):
            raise DomainError("Payment method should be the original payment method")
        if self._first_missing(order, item_ids) is not None:
            raise DomainError("Some item not found")
        order.status = "return requested"
        order.return_items, order.return_payment_method_id = sorted(item_ids), payment_method_id
        return order

    def toolkit(self) -> Toolkit:
        kinds = {READ: ("find_user_id_by_email", "find_user_id_by_name_zip",
                        "get_order_details", "get_product_details", "get_user_details",
                        "get_item_details", "list_all_product_types"),
                 GENERIC: ("calculate", "transfer_to_human_agents"),
                 WRITE: ("cancel_pending_order", "modify_pending_order_address",
                         "modify_user_address", "modify_pending_order_payment",
                         "modify_pending_order_items", "exchange_delivered_order_items",
                         "return_delivered_order_items")}
        return Toolkit({name: ToolSpec(getattr(self, name), kind)
                        for kind, names in kinds.items() for name in names})
