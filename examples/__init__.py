"""cogworker's example app: jobs, cron entries, a worker config, the dashboard in a small web
app, a demo-data seeder and a stress tool. ``examples/README.md`` says how to run each."""
