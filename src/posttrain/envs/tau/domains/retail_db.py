"""The ``retail`` domain's database: products with variants, users with payment methods,
orders (field order as declared: it is the order tool results print in)."""

from __future__ import annotations

from typing import Literal

from posttrain.envs.tau.db import Record


class Variant(Record):
    item_id: str
    options: dict[str, str]
    available: bool
    price: float


class Product(Record):
    name: str
    product_id: str
    variants: dict[str, Variant]


class Name(Record):
    first_name: str
    last_name: str


class Address(Record):
    address1: str
    address2: str
    city: str
    country: str
    state: str
    zip: str


class CreditCard(Record):
    source: Literal["credit_card"]
    id: str
    brand: str
    last_four: str


class GiftCard(Record):
    source: Literal["gift_card"]
    id: str
    balance: float


class PayPal(Record):
    source: Literal["paypal"]
    id: str


PaymentMethod = CreditCard | GiftCard | PayPal


class RetailUser(Record):
    user_id: str
    name: Name
    address: Address
    email: str
    payment_methods: dict[str, PaymentMethod]
    orders: list[str]


class OrderItem(Record):
    name: str
    product_id: str
    item_id: str
    price: float
    options: dict[str, str]


class Fulfillment(Record):
    tracking_id: list[str]
    item_ids: list[str]


class Payment(Record):
    transaction_type: Literal["payment", "refund"]
    amount: float
    payment_method_id: str


class Order(Record):
    order_id: str
    user_id: str
    address: Address
    items: list[OrderItem]
    status: str
    fulfillments: list[Fulfillment]
    payment_history: list[Payment]
    cancel_reason: str | None = None
    exchange_items: list[str] | None = None
    exchange_new_items: list[str] | None = None
    exchange_payment_method_id: str | None = None
    exchange_price_difference: float | None = None
    return_items: list[str] | None = None
    return_payment_method_id: str | None = None


class RetailDB(Record):
    products: dict[str, Product]
    users: dict[str, RetailUser]
    orders: dict[str, Order]
