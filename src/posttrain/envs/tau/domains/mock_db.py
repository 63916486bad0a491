"""The ``mock`` domain's databases: tasks and users (agent side), notifications (user side)."""

from __future__ import annotations

from typing import Literal

from posttrain.envs.tau.db import Record


class MockTask(Record):
    task_id: str
    title: str
    description: str | None = None
    status: Literal["pending", "completed"] | str = "pending"


class MockUser(Record):
    user_id: str
    name: str
    tasks: list[str]


class MockDB(Record):
    tasks: dict[str, MockTask]
    users: dict[str, MockUser]


class Notification(Record):
    notification_id: str
    message: str
    status: Literal["unread", "read"] = "unread"
    task_id: str | None = None


class MockUserDB(Record):
    notifications: dict[str, Notification]
