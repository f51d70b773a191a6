//! Reset and fork in the simulator, as the owner applies them: the plan
//! (`crate::restore`), the runs of [`crate::restore::reset`] / [`crate::restore::restored`]
//! appended (a reset run archived), and their effects carried out.

use super::{Sim, SimExecution};
use crate::command::CommandError;
use crate::restore::{self, Point, Restore, Restored, Source};
use crate::run::{Pass, Run};
use crate::state::State;
use orbit_codes::ErrorCode;
use orbit_definition::Definition;
use std::sync::Arc;

impl Sim {
    /// Resets execution `id` to `to`: its current run closes (`WorkflowReset`) and the next
    /// one goes on from the state at that point; the signals received after it are received
    /// again when `keep_signals`; `version` migrates the new run right away. The execution
    /// must be settled (after [`Sim::run`]).
    ///
    /// # Errors
    /// `EXECUTION_NOT_FOUND`, what [`restore::point`] / [`restore::plan`] refuse, or the
    /// migration's refusal.
    pub fn reset(
        &mut self,
        id: &str,
        to: &Point,
        keep_signals: bool,
        version: Option<Definition>,
    ) -> Result<Restore, CommandError> {
        let pass = Pass { now: self.now, limits: &self.limits, caps: self.capabilities };
        let before = self.timers.get(id).copied();
        let (history, def, plan) = self.source(id, to)?;
        let exec = &self.executions[id];
        let created = restore::reset_created(&history[0].event, &exec.state)
            .ok_or_else(|| CommandError::new(ErrorCode::InvalidArgument, "no WorkflowCreated"))?;
        let source = Source { execution_id: id, run: exec.state.run };
        let r = Restored {
            def: &def,
            to: version.as_ref(),
            restore: &plan,
            source,
            reason: "",
            keep_signals,
        };
        let current = exec.def.clone();
        let mut state = exec.state.clone();
        let (runs, _) = restore::reset(&current, &mut state, &r, created, before, &pass)?;
        let exec = self.executions.get_mut(id).expect("looked up above");
        exec.state = state;
        exec.def = Arc::new(version.unwrap_or(def));
        self.append(id, runs, true);
        Ok(plan)
    }

    /// Forks execution `id` at `at_seq` of its current run into a new execution `new_id`
    /// (optionally migrated to `version`).
    ///
    /// # Errors
    /// `EXECUTION_NOT_FOUND`, `EXECUTION_EXISTS`, what [`restore::plan`] refuses, or the
    /// migration's refusal.
    pub fn fork(
        &mut self,
        id: &str,
        at_seq: u64,
        new_id: &str,
        version: Option<Definition>,
    ) -> Result<Restore, CommandError> {
        let pass = Pass { now: self.now, limits: &self.limits, caps: self.capabilities };
        if self.executions.contains_key(new_id) {
            return Err(CommandError::new(ErrorCode::ExecutionExists, new_id));
        }
        let (history, def, plan) = self.source(id, &Point::Seq(at_seq))?;
        let created = restore::fork_created(&history[0].event, new_id)
            .ok_or_else(|| CommandError::new(ErrorCode::InvalidArgument, "no WorkflowCreated"))?;
        let source = Source { execution_id: id, run: self.executions[id].state.run };
        let r = Restored {
            def: &def,
            to: version.as_ref(),
            restore: &plan,
            source,
            reason: "",
            keep_signals: false,
        };
        let mut state = State::default();
        let (runs, _) = restore::restored(&mut state, &r, created, Some(None), &pass)?;
        let def = Arc::new(version.unwrap_or(def));
        let exec = SimExecution { def, state, history: Vec::new(), archived: Vec::new() };
        self.executions.insert(new_id.to_string(), exec);
        self.timers.insert(new_id.to_string(), None);
        self.append(new_id, runs, false);
        Ok(plan)
    }

    /// Execution `id`'s current history, the definition in effect at the point `to` names,
    /// and the plan of a restoration from there.
    fn source(
        &self,
        id: &str,
        to: &Point,
    ) -> Result<(Vec<crate::event::HistoryEvent>, Definition, Restore), CommandError> {
        let exec = self
            .executions
            .get(id)
            .ok_or_else(|| CommandError::new(ErrorCode::ExecutionNotFound, id))?;
        let history = exec.history.clone();
        let through = restore::point(&history, to)?;
        let def = self.def_at(&history, through)?;
        let plan = restore::plan(&def, &history, through)?;
        Ok((history, def, plan))
    }

    /// The registered definition in effect at `seq` of `history`.
    fn def_at(
        &self,
        history: &[crate::event::HistoryEvent],
        seq: u64,
    ) -> Result<Definition, CommandError> {
        let hash = restore::state_at(history, seq).definition_hash;
        self.defs.iter().find(|d| d.hash == hash).map(|d| (**d).clone()).ok_or_else(|| {
            CommandError::new(ErrorCode::WorkflowNotFound, format!("no definition {hash}"))
        })
    }

    /// Appends a restoration's runs to `id`'s histories and carries out their effects; the
    /// first run is the reset one (archived) when `closes_first`.
    fn append(&mut self, id: &str, runs: Vec<Run>, closes_first: bool) {
        let mut effects = Vec::new();
        let exec = self.executions.get_mut(id).expect("present");
        for (i, run) in runs.into_iter().enumerate() {
            exec.history.extend(run.events);
            let continued =
                run.effects.iter().any(|e| matches!(e, crate::Effect::ContinueAsNew { .. }));
            if continued || (i == 0 && closes_first) {
                exec.archived.push(std::mem::take(&mut exec.history));
            }
            effects.extend(run.effects);
        }
        for effect in effects {
            self.carry_out(id, effect);
        }
    }
}
