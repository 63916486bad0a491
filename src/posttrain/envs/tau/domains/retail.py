"""The ``retail`` domain's agent tools (TAU_ENV.md §5): look up users, orders and products;
cancel or modify pending orders; exchange or return delivered ones. Each tool looks up its order
(or user) first, then applies its checks in order: the first failing one decides the error."""

from __future__ import annotations

import json
from collections import Counter

from posttrain.envs.tau.db import data_dir, load_db
from posttrain.envs.tau.domains.retail_db import (
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
from posttrain.envs.tau.toolkit import (
    GENERIC,
    READ,
    WRITE,
    DomainError,
    Toolkit,
    transfer_to_human_agents,
)

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
CALC_CHARS = set("0123456789+-*/(). ")
# the first checks of modifying a pending order's items and exchanging a delivered order's
MODIFY_CHECKS = ("pending", "Non-pending order cannot be modified", "{} not found",
                 "The number of items to be exchanged should match")
EXCHANGE_CHECKS = ("delivered", "Non-delivered order cannot be exchanged",
                   "Number of {} not found.", "The number of items to be exchanged should match.")


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

    def _swappable(self, order_id: str, item_ids: list[str], new_item_ids: list[str],
                   checks: tuple[str, str, str, str]) -> Order:
        """The order whose items are to be swapped, after the first checks of ``checks`` =
        (required status, its refusal, the multiset refusal (``{}``: the item), length refusal)."""
        status, refused, missing_message, mismatch = checks
        order = self._order(order_id)
        if order.status != status:
            raise DomainError(refused)
        missing = self._first_missing(order, item_ids)
        if missing is not None:
            raise DomainError(missing_message.format(missing))
        if len(item_ids) != len(new_item_ids):
            raise DomainError(mismatch)
        return order

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
        """Evaluate an arithmetic expression, e.g. to add up prices or a refund.

        Args:
            expression: Digits, + - * /, parentheses, decimal points and spaces only, e.g.
                '(19.99+5.01)*2'.

        Returns:
            The result rounded to two decimals, as a string.
        """
        if not set(expression) <= CALC_CHARS:
            raise DomainError("Invalid characters in expression")
        value = eval(expression, {"__builtins__": {}}, {})  # digits and operators only
        return str(round(float(value), 2))

    def find_user_id_by_email(self, email: str) -> str:
        """Find a customer's user id from their email address (case-insensitive). Use this first to
        identify the customer when they give an email.

        Args:
            email: The customer's email address, e.g. 'jane.doe1234@example.com'.

        Returns:
            The user id, e.g. 'jane_doe_1234'.
        """
        for user_id, user in self.db.users.items():
            if user.email.lower() == email.lower():
                return user_id
        raise DomainError("User not found")

    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a customer's user id from their first name, last name and zip code, e.g. when they
        cannot give an email. Names are case-insensitive; the zip code must match exactly.

        Args:
            first_name: The customer's first name, e.g. 'Jane'.
            last_name: The customer's last name, e.g. 'Doe'.
            zip: The zip code of the customer's address, e.g. '12345'.

        Returns:
            The user id, e.g. 'jane_doe_1234'.
        """
        for user_id, user in self.db.users.items():
            if (user.name.first_name.lower() == first_name.lower()
                    and user.name.last_name.lower() == last_name.lower()
                    and user.address.zip == zip):
                return user_id
        raise DomainError("User not found")

    def get_order_details(self, order_id: str) -> Order:
        """Get the details of an order: its status, items (names, product and item ids, prices,
        options), shipping address, fulfillments and payment history.

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.

        Returns:
            The order record.
        """
        return self._order(order_id)

    def get_product_details(self, product_id: str) -> Product:
        """Get a product type with all its variants (item ids, options, availability and prices).

        Args:
            product_id: Id of the product type (a 10-digit string, not an item id); see
                list_all_product_types.

        Returns:
            The product record.
        """
        return self._product(product_id)

    def get_user_details(self, user_id: str) -> RetailUser:
        """Get a customer's profile: name, default address, email, payment methods (including gift
        card balances) and the ids of their orders.

        Args:
            user_id: The customer's user id, e.g. 'jane_doe_1234'.

        Returns:
            The user record.
        """
        return self._user(user_id)

    def get_item_details(self, item_id: str) -> Variant:
        """Get a single item (one variant of a product) by its item id: its options, whether it is
        available, and its price.

        Args:
            item_id: Id of the item, a 10-digit string, e.g. '1234567890'.

        Returns:
            The item record.
        """
        for product in self.db.products.values():
            if item_id in product.variants:
                return product.variants[item_id]
        raise DomainError("Item not found")

    def list_all_product_types(self) -> str:
        """List every product type sold in the store, with its product id.

        Returns:
            A JSON object mapping product name to product id.
        """
        return json.dumps({p.name: p.product_id for p in self.db.products.values()}, sort_keys=True)

    transfer_to_human_agents = staticmethod(transfer_to_human_agents)

    # -- write -----------------------------------------------------------------------------
    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        """Cancel an order whose status is exactly 'pending'. Every payment of the order is refunded
        to the method it came from (gift cards are refunded immediately).

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.
            reason: Why the customer cancels; must be 'no longer needed' or 'ordered by mistake'.

        Returns:
            The cancelled order.
        """
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
        """Change the shipping address of a pending order (status 'pending' or 'pending (item
        modified)').

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.
            address1: First line of the street address, e.g. '123 Main St'.
            address2: Second address line (apartment, suite); may be an empty string.
            city: City name.
            state: State code, e.g. 'CA'.
            country: Country, e.g. 'USA'.
            zip: Zip code, e.g. '12345'.

        Returns:
            The updated order.
        """
        order = self._order(order_id)
        if "pending" not in order.status:
            raise DomainError("Non-pending order cannot be modified")
        order.address = Address(address1=address1, address2=address2, city=city,
                                country=country, state=state, zip=zip)
        return order

    def modify_user_address(self, user_id: str, address1: str, address2: str, city: str,
                            state: str, country: str, zip: str) -> RetailUser:
        """Change the default address in a customer's profile; existing orders keep their addresses.

        Args:
            user_id: The customer's user id, e.g. 'jane_doe_1234'.
            address1: First line of the street address, e.g. '123 Main St'.
            address2: Second address line (apartment, suite); may be an empty string.
            city: City name.
            state: State code, e.g. 'CA'.
            country: Country, e.g. 'USA'.
            zip: Zip code, e.g. '12345'.

        Returns:
            The updated user record.
        """
        user = self._user(user_id)
        user.address = Address(address1=address1, address2=address2, city=city,
                               country=country, state=state, zip=zip)
        return user

    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> Order:
        """Pay for a pending order with a different payment method of the same customer; the old
        method is refunded. The order must have exactly one payment so far, the new method must
        differ from it, and a gift card must have enough balance for the whole amount.

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.
            payment_method_id: Id of one of the customer's payment methods, e.g.
                'credit_card_0000000', 'gift_card_0000000' or 'paypal_0000000'.

        Returns:
            The updated order.
        """
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
        history.append(Payment(transaction_type="refund", amount=amount, payment_method_id=old_id))
        if isinstance(new, GiftCard):
            new.balance = round(new.balance - amount, 2)
        old = self._method(order, old_id)
        if isinstance(old, GiftCard):
            old.balance = round(old.balance + amount, 2)
        return order

    def modify_pending_order_items(self, order_id: str, item_ids: list[str],
                                   new_item_ids: list[str], payment_method_id: str) -> Order:
        """Swap items of an order whose status is exactly 'pending' for other available variants of
        the same products; the price difference is charged or refunded. This can be done only once
        per order (its status becomes 'pending (item modified)'), so collect every change first.

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.
            item_ids: Item ids in the order to replace; repeat an id to replace several units.
            new_item_ids: The replacement item ids, in the same positions as item_ids; each must be
                an available variant of the same product and differ from the item it replaces.
            payment_method_id: The customer's payment method that pays or receives the price
                difference, e.g. 'credit_card_0000000', 'gift_card_0000000' or 'paypal_0000000'; a
                gift card must cover any extra cost.

        Returns:
            The updated order.
        """
        order = self._swappable(order_id, item_ids, new_item_ids, MODIFY_CHECKS)
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
        """Request an exchange of items from a delivered order for other available variants of the
        same products. The order's status becomes 'exchange requested', so collect every item to
        exchange first.

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.
            item_ids: Item ids in the order to exchange; repeat an id to exchange several units.
            new_item_ids: The new item ids, in the same positions as item_ids; each must be an
                available variant of the same product.
            payment_method_id: The customer's payment method that pays or receives the price
                difference, e.g. 'credit_card_0000000', 'gift_card_0000000' or 'paypal_0000000'; a
                gift card must cover any extra cost.

        Returns:
            The updated order.
        """
        order = self._swappable(order_id, item_ids, new_item_ids, EXCHANGE_CHECKS)
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
        """Request a return of items from a delivered order; the order's status becomes 'return
        requested' and the refund goes to the given payment method.

        Args:
            order_id: Id of the order, including the leading '#', e.g. '#W0000000'.
            item_ids: Item ids in the order to return; repeat an id to return several units.
            payment_method_id: Where the refund goes: the order's original payment method or one of
                the customer's gift cards, e.g. 'credit_card_0000000', 'gift_card_0000000' or
                'paypal_0000000'.

        Returns:
            The updated order.
        """
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
        return Toolkit.of(self, [
            (READ, ("find_user_id_by_email", "find_user_id_by_name_zip", "get_order_details",
                    "get_product_details", "get_user_details", "get_item_details",
                    "list_all_product_types")),
            (GENERIC, ("calculate", "transfer_to_human_agents")),
            (WRITE, ("cancel_pending_order", "modify_pending_order_address",
                     "modify_user_address", "modify_pending_order_payment",
                     "modify_pending_order_items", "exchange_delivered_order_items",
                     "return_delivered_order_items"))])
