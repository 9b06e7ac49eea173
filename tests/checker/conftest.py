"""Fixtures the checker tests share: the local Redfish service and its password file
(tests/checker/redfish_server.py), requested as `service` and `password_file`."""

from tests.checker.redfish_server import redfish_password_fixture, redfish_service_fixture  # noqa: F401 (fixtures)
