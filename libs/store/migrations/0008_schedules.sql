-- 0008: what the schedules of issue 12 keep beside the columns of 0001.
--   workflow   the workflow the schedule starts (ListSchedules filters by it);
--   note       why the schedule is paused (PauseSchedule's note, or pause on failure);
--   remaining  scheduled starts still allowed, NULL for no limit;
--   buffered   occurrences waiting under a BUFFER_* overlap policy, a JSON array of times.
ALTER TABLE schedules ADD COLUMN workflow TEXT NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN note TEXT NOT NULL DEFAULT '';
ALTER TABLE schedules ADD COLUMN remaining BIGINT;
ALTER TABLE schedules ADD COLUMN buffered TEXT NOT NULL DEFAULT '[]';
CREATE INDEX schedules_by_workflow ON schedules (workflow, schedule_id);
-- ListExecutions(schedule_id = ...), newest first.
CREATE INDEX executions_by_schedule ON executions (schedule_id, created_at);
