-- 014_workflow_lifecycle: schedules that start workflows (rota.domain.workflow.slot_graph).
-- workflow: each slot writes the graph a builder registered in code under the schedule's name
-- returns, instead of one job of its kind. (What a deleted parent does to its children is
-- code on SQLite, in the transaction that deletes it: rota.store.sqlite.jobs.)
ALTER TABLE rota_schedules ADD COLUMN workflow INTEGER NOT NULL DEFAULT 0;
