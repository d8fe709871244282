-- 021_counting_triggers_cannot_abort: the triggers that count changes of state make the
-- counter row they add to, when missing, with an INSERT that looks first and so never
-- conflicts, then add with an UPDATE, instead of an upsert. An upsert can abort its
-- statement, so any UPDATE of rota_jobs that could fire one (SQLite decides when it compiles
-- the statement, whatever the WHEN then says) kept a statement journal of every page it
-- changed, to undo itself alone; past 64 KiB SQLite moves that journal to a temporary file,
-- and each claim of a drain created, wrote and deleted one. With these triggers, the writes
-- that say OR ROLLBACK (rota.store.sqlite.claims._TAKE) keep none. Not INSERT OR IGNORE:
-- inside a trigger, the firing statement's OR clause replaces the trigger's own. Same counts,
-- same conditions.

DROP TRIGGER rota_jobs_counted_update;
CREATE TRIGGER rota_jobs_counted_update AFTER UPDATE OF state, queue ON rota_jobs
WHEN (old.state IS NOT new.state OR old.queue IS NOT new.queue)
 AND NOT (old.queue = new.queue
          AND ((old.state = 'pending' AND new.state = 'running')
               OR (old.state = 'running' AND new.state = 'succeeded')))
BEGIN
    UPDATE rota_counts SET n = n - 1 WHERE queue = old.queue AND state = old.state;
    INSERT INTO rota_counts (queue, state, n) SELECT new.queue, new.state, 0
    WHERE NOT EXISTS (SELECT 1 FROM rota_counts WHERE queue = new.queue AND state = new.state);
    UPDATE rota_counts SET n = n + 1 WHERE queue = new.queue AND state = new.state;
END;

DROP TRIGGER rota_jobs_tallied_update;
CREATE TRIGGER rota_jobs_tallied_update AFTER UPDATE OF state ON rota_jobs
WHEN old.state IS NOT new.state
 AND NOT (old.state = 'pending' AND new.state = 'running')
 AND NOT (old.state = 'running' AND new.state = 'succeeded')
 AND (old.state = 'succeeded' OR old.state = 'dead' OR old.state = 'cancelled'
      OR new.state = 'succeeded' OR new.state = 'dead' OR new.state = 'cancelled')
BEGIN
    UPDATE rota_finished_per_second SET n = n - 1
    WHERE (old.state = 'succeeded' OR old.state = 'dead' OR old.state = 'cancelled')
      AND old.finished_at IS NOT NULL
      AND second = old.finished_at - old.finished_at % 1000000 AND state = old.state;
    INSERT INTO rota_finished_per_second (second, state, n)
    SELECT new.finished_at - new.finished_at % 1000000, new.state, 0
    WHERE (new.state = 'succeeded' OR new.state = 'dead' OR new.state = 'cancelled')
      AND new.finished_at IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM rota_finished_per_second
                      WHERE second = new.finished_at - new.finished_at % 1000000
                        AND state = new.state);
    UPDATE rota_finished_per_second SET n = n + 1
    WHERE (new.state = 'succeeded' OR new.state = 'dead' OR new.state = 'cancelled')
      AND new.finished_at IS NOT NULL
      AND second = new.finished_at - new.finished_at % 1000000 AND state = new.state;
END;
