-- 0021: a debounced start keeps its memo (`dedupe:`, docs/flow-control.md, "Debounce and
-- singleton starts"). `memo` is the start's memo as JSON text, NULL when it gave none; it
-- goes with the input: the start kept (the first or the last) is the one whose memo the
-- execution records in its `WorkflowCreated`.
ALTER TABLE start_dedupe ADD COLUMN memo TEXT;
ALTER TABLE start_debounce_fires ADD COLUMN memo TEXT;
