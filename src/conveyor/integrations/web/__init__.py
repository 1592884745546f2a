"""The web dashboard: an ASGI app (Starlette, Jinja2 templates, htmx) to run
with `conveyor dashboard` or mount inside any ASGI app. See docs/dashboard.md."""

from conveyor.integrations.web.app import DashboardSettings, dashboard_app, with_dashboard

__all__ = ["DashboardSettings", "dashboard_app", "with_dashboard"]
