//! Rescoring the archive in place, when the discriminator that scored its programs is retrained
//! (`[fitness] retrain_every`): new metrics for every program, then the indexes rebuilt as if
//! the programs had been added again in creation order — each cell's elite, the best and the
//! elite archive. Populations, islands, creation order, failures and the random stream are
//! left as they are, so the search goes on from the same state with comparable scores.

use std::collections::BTreeMap;

use crate::evolve::archive::program::Program;
use crate::evolve::archive::{cell_key, Archive};
use crate::Result;

impl Archive {
    /// Replace every program's metrics by `rescore(program)` (keys it returns are set, the
    /// others kept; `None` leaves the program as it is) and rebuild the cells, the best and the
    /// elite archive from them.
    ///
    /// # Errors
    /// When a rescored program lacks its fitness or a descriptor metric (the archive is then
    /// left unchanged).
    pub fn rescore(
        &mut self,
        mut rescore: impl FnMut(&Program) -> Option<BTreeMap<String, f64>>,
    ) -> Result<()> {
        let mut programs = self.programs.clone();
        for p in programs.values_mut() {
            if let Some(m) = rescore(p) {
                p.metrics.extend(m);
            }
        }
        let mut with_descriptors = BTreeMap::new();
        for (id, p) in &programs {
            let mut p = p.clone();
            p.descriptors = self.descriptors_of(&p)?;
            if self.fitness(&p).is_none() {
                return Err(crate::Error::parse(
                    "<archive>",
                    format!("program '{id}'"),
                    format!(
                        "rescored without its fitness metric '{}'",
                        self.cfg.fitness_metric
                    ),
                ));
            }
            with_descriptors.insert(id.clone(), p);
        }
        self.programs = with_descriptors;
        let mut order: Vec<_> = self.programs.values().collect();
        order.sort_by_key(|p| p.created_seq);
        let order: Vec<_> = order.into_iter().map(|p| p.id.clone()).collect();
        for isl in &mut self.islands {
            isl.cells.clear();
        }
        self.best = None;
        for id in &order {
            let (island, key) = {
                let p = &self.programs[id];
                (p.island, cell_key(&self.cell_of(&p.descriptors)))
            };
            let displace = match self.islands[island].cells.get(&key) {
                None => true,
                Some(old) => self.fit(id) > self.fit(old),
            };
            if displace {
                self.islands[island].cells.insert(key, id.clone());
            }
            if self
                .best
                .as_ref()
                .is_none_or(|b| self.fit(id) > self.fit(b))
            {
                self.best = Some(id.clone());
            }
        }
        let mut ranked = order;
        self.sorted_best_first(&mut ranked);
        ranked.truncate(self.cfg.archive_size);
        self.elite_archive = ranked;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evolve::archive::program::ProgramId;
    use crate::evolve::archive::ArchiveConfig;

    fn program(id: &str, hl: f64, cov: f64) -> Program {
        Program::seed(ProgramId::new(id), format!("x = '{id}'\n")).with_metrics([
            ("combined", 0.5 * hl + 0.5 * cov),
            ("human_likeness", hl),
            ("coverage", cov),
        ])
    }

    #[test]
    fn rescoring_rebuilds_cells_best_and_elites_as_a_replay_would() {
        let cfg = ArchiveConfig {
            num_islands: 1,
            ..ArchiveConfig::default()
        };
        let mut a = Archive::new(cfg.clone(), 1).unwrap();
        for (id, hl, cov) in [("a", 0.9, 0.5), ("b", 0.3, 0.5), ("c", 0.35, 0.51)] {
            a.add(program(id, hl, cov), 0).unwrap();
        }
        assert_eq!(a.best().unwrap().id.as_str(), "a");
        // the retrained discriminator finds `a` far less human: b and c lead, cells move
        let new_hl = BTreeMap::from([("a", 0.1), ("b", 0.3), ("c", 0.35)]);
        a.rescore(|p| {
            let hl = new_hl[p.id.as_str()];
            let cov = p.metric("coverage").unwrap();
            Some(BTreeMap::from([
                ("human_likeness".to_string(), hl),
                ("combined".to_string(), 0.5 * hl + 0.5 * cov),
            ]))
        })
        .unwrap();
        // the same archive built from the rescored programs directly
        let mut replay = Archive::new(cfg, 1).unwrap();
        for (id, cov) in [("a", 0.5), ("b", 0.5), ("c", 0.51)] {
            replay.add(program(id, new_hl[id], cov), 0).unwrap();
        }
        assert_eq!(a.best().unwrap().id.as_str(), "c");
        assert_eq!(
            a.island_elites(0)
                .iter()
                .map(|(c, p)| (c.clone(), p.id.clone()))
                .collect::<Vec<_>>(),
            replay
                .island_elites(0)
                .iter()
                .map(|(c, p)| (c.clone(), p.id.clone()))
                .collect::<Vec<_>>()
        );
        let ids = |x: &Archive| {
            x.elite_archive()
                .iter()
                .map(|p| p.id.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&a), ids(&replay));
        // the saved state reads back (its consistency checks pass)
        let back = Archive::from_json(&a.to_json()).unwrap();
        assert_eq!(back.to_json(), a.to_json());
        // a rescore without the fitness metric is refused and changes nothing
        let before = a.to_json();
        let mut broken = a.clone();
        assert!(broken
            .rescore(|_| Some(BTreeMap::from([("combined".to_string(), f64::NAN)])))
            .is_err());
        assert_eq!(broken.to_json(), before);
    }
}
