//! The engine's adapters: the recovery adapter its file carries, and task adapters
//! loaded, chosen and freed by name.

use super::{AdapterChoice, Engine, Resident, ResidentAdapter};
use crate::adapters::recovery;
use crate::engine::prefix_cache::Fingerprint;
use crate::error::{Error, Result};
use crate::gguf::Gguf;
use std::rc::Rc;

impl Engine {
    pub(super) fn active_adapter(&self) -> Option<Resident> {
        self.active
            .as_deref()
            .and_then(|n| self.adapters.get(n))
            .or(self.base_adapter())
            .cloned()
    }

    /// Parses and makes resident the recovery adapter the file carries (`tensors`,
    /// read by the loader): from then on it runs under every reply.
    pub(super) fn take_recovery(&mut self, g: &Gguf, mut tensors: recovery::Tensors) -> Result<()> {
        if !recovery::present(&g.metadata) {
            return Ok(());
        }
        let adapter = recovery::read(&g.metadata, self.config(), |n| tensors.remove(n))?;
        let resident = Rc::from(self.body.upload(adapter.clone())?);
        self.recovery = Some((adapter, resident));
        self.recovery_on = true;
        Ok(())
    }

    /// The recovery adapter's rank and bytes, when the model's file carries one, and
    /// whether it runs under the base model's replies.
    pub fn recovery(&self) -> Option<(usize, u64, bool)> {
        let on = self.recovery_on;
        self.recovery.as_ref().map(|(a, r)| (a.rank, r.bytes(), on))
    }

    /// Whether the recovery adapter runs under replies that name no adapter (`false`
    /// measures the compressed model alone). Task adapters keep it: they were stacked
    /// on it when loaded.
    pub fn set_recovery(&mut self, on: bool) -> Result<()> {
        self.idle()?;
        self.recovery_on = on;
        Ok(())
    }

    /// The recovery adapter, where it runs under the base model.
    pub(super) fn base_adapter(&self) -> Option<&Resident> {
        self.recovery
            .as_ref()
            .filter(|_| self.recovery_on)
            .map(|r| &r.1)
    }

    pub(super) fn adapter(&self, choice: &AdapterChoice) -> Result<Option<Resident>> {
        let name = match choice {
            AdapterChoice::Active => self.active.as_deref(),
            AdapterChoice::None => None,
            AdapterChoice::Named(n) => Some(n.as_str()),
        };
        match name {
            // The base model: with its recovery adapter, where it has one.
            None => Ok(self.base_adapter().cloned()),
            Some(n) => self
                .adapters
                .get(n)
                .cloned()
                .map(Some)
                .ok_or_else(|| Error::invalid(format!("no adapter named {n:?} is loaded"))),
        }
    }

    pub(super) fn adapter_name(&self, choice: &AdapterChoice) -> Option<String> {
        match choice {
            AdapterChoice::Active => self.active.clone(),
            AdapterChoice::None => None,
            AdapterChoice::Named(n) => Some(n.clone()),
        }
    }

    /// Uploads a PEFT LoRA adapter under `name` (replacing one of that name).
    pub fn load_adapter(&mut self, name: &str, config: &[u8], weights: &[u8]) -> Result<()> {
        self.idle()?;
        let mut adapter = crate::adapters::parse(config, weights, self.config())?;
        // Trained on the recovered model, a task adapter runs on top of its recovery.
        if let Some((base, _)) = &self.recovery {
            adapter = crate::adapters::stack(base, &adapter);
        }
        let resident = self.body.upload(adapter)?;
        if let Some(old) = self.adapters.insert(name.to_string(), Rc::from(resident)) {
            self.prefix.forget_adapter(old.id());
        }
        let print = Fingerprint::default().with(config).with(weights).value();
        self.adapter_prints.retain(|p| p.0 != name);
        self.adapter_prints.push((name.to_string(), print));
        Ok(())
    }

    /// The adapter of replies that do not name one (`None`: the base model).
    pub fn use_adapter(&mut self, name: Option<&str>) -> Result<()> {
        self.idle()?;
        if let Some(n) = name {
            self.adapter(&AdapterChoice::Named(n.into()))?;
        }
        self.active = name.map(str::to_string);
        Ok(())
    }

    /// Frees an adapter's GPU memory; false when there was none of that name.
    pub fn unload_adapter(&mut self, name: &str) -> Result<bool> {
        self.idle()?;
        if self.active.as_deref() == Some(name) {
            self.active = None;
        }
        self.adapter_prints.retain(|p| p.0 != name);
        match self.adapters.remove(name) {
            Some(a) => {
                self.prefix.forget_adapter(a.id());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    pub fn adapters(&self) -> Vec<ResidentAdapter> {
        self.adapters
            .iter()
            .map(|(name, a)| ResidentAdapter {
                name: name.clone(),
                bytes: a.bytes(),
                rank: a.rank(),
                active: self.active.as_deref() == Some(name),
            })
            .collect()
    }
}
