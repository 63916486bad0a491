"""The ``mock`` domain (TAU_ENV.md §4): tools on a user's tasks (agent) and notifications (user)."""

from __future__ import annotations

from posttrain.envs.tau.db import data_dir, load_db
from posttrain.envs.tau.domains.mock_db import MockDB, MockTask, MockUserDB, Notification
from posttrain.envs.tau.toolkit import (
    GENERIC,
    READ,
    WRITE,
    DomainError,
    Toolkit,
    transfer_to_human_agents,
)


class MockTools:
    def __init__(self, db: MockDB) -> None:
        self.db = db

    def create_task(self, user_id: str, title: str, description: str | None = None) -> MockTask:
        """Create a new task for a user; it starts with status 'pending' and is added to the user's
        task list.

        Args:
            user_id: Id of the user who will own the task, e.g. 'user_1'.
            title: Short title of the task.
            description: Optional longer description of the task.

        Returns:
            The new task, with its assigned id ('task_<number>') and status.
        """
        if user_id not in self.db.users:
            raise DomainError(f"User {user_id} not found")
        task_id = f"task_{len(self.db.tasks) + 1}"
        task = MockTask(task_id=task_id, title=title, description=description)
        self.db.tasks[task_id] = task
        self.db.users[user_id].tasks.append(task_id)
        return task

    def get_users(self) -> list:
        """List all users, each with their id, name and the ids of their tasks.

        Returns:
            A list of user records.
        """
        return list(self.db.users.values())

    transfer_to_human_agents = staticmethod(transfer_to_human_agents)

    def update_task_status(self, task_id: str, status: str) -> MockTask:
        """Change the status of an existing task.

        Args:
            task_id: Id of the task, e.g. 'task_1'.
            status: The new status: 'pending' or 'completed'.

        Returns:
            The updated task.
        """
        task = self._task(task_id)
        task.__dict__["status"] = status  # the value is not validated (§4)
        return task

    def assert_number_of_tasks(self, user_id: str, expected_number: int) -> bool:
        if user_id not in self.db.users:
            raise DomainError(f"User {user_id} not found")
        return len(self.db.users[user_id].tasks) == expected_number

    def assert_task_status(self, task_id: str, expected_status: str) -> bool:
        return self._task(task_id).status == expected_status

    def _task(self, task_id: str) -> MockTask:
        if task_id not in self.db.tasks:
            raise DomainError(f"Task {task_id} not found")
        return self.db.tasks[task_id]

    def toolkit(self) -> Toolkit:
        return Toolkit.of(self, [(WRITE, ["create_task"]), (READ, ["get_users"]),
                                 (GENERIC, ["transfer_to_human_agents"]),
                                 (WRITE, ["update_task_status"])],
                          ["assert_number_of_tasks", "assert_task_status"])


class MockUserTools:
    def __init__(self, db: MockUserDB) -> None:
        self.db = db

    def check_notifications(self) -> list:
        """Show all notifications on your device, each with its id, message, whether it has been
        read, and the id of the task it is about (if any).

        Returns:
            A list of notifications.
        """
        return list(self.db.notifications.values())

    def dismiss_notification(self, notification_id: str) -> str:
        """Dismiss one of your notifications, which marks it as read.

        Args:
            notification_id: Id of the notification to dismiss, e.g. 'notif_1'.

        Returns:
            A confirmation message.
        """
        self._notification(notification_id).status = "read"
        return f"Notification {notification_id} dismissed"

    def add_notification(self, notification_id: str, message: str,
                         task_id: str | None = None) -> None:
        self.db.notifications[notification_id] = Notification(
            notification_id=notification_id, message=message, task_id=task_id)

    def assert_notification_status(self, notification_id: str, expected_status: str) -> bool:
        return self._notification(notification_id).status == expected_status

    def _notification(self, notification_id: str) -> Notification:
        if notification_id not in self.db.notifications:
            raise DomainError(f"Notification {notification_id} not found")
        return self.db.notifications[notification_id]

    def toolkit(self) -> Toolkit:
        return Toolkit.of(self, [(READ, ["check_notifications"]),
                                 (WRITE, ["dismiss_notification"])],
                          ["add_notification", "assert_notification_status"])


def pristine() -> tuple[MockDB, MockUserDB]:
    """The shipped mock databases."""
    return (load_db(MockDB, data_dir("mock") / "db.json"),
            load_db(MockUserDB, data_dir("mock") / "user_db.json"))
