//! The speed goals, judged on the run's figures.

/// The speed goals, each as its best benchmark figure: printed last
/// as `goal.NAME figure=... target=... met|NOT met (the benchmark)`.
#[derive(Default)]
pub struct Goals {
    /// (name, best figure so far, the benchmark it came from)
    rows: Vec<(&'static str, f64, String)>,
}

impl Goals {
    /// Keeps the higher figure of a goal met from above (bandwidth shares).
    pub fn at_least(&mut self, name: &'static str, figure: f64, from: String) {
        self.keep(name, figure, from, |new, old| new > old);
    }

    /// Keeps the lower figure of a goal met from below (time ratios).
    pub fn at_most(&mut self, name: &'static str, figure: f64, from: String) {
        self.keep(name, figure, from, |new, old| new < old);
    }

    fn keep(
        &mut self,
        name: &'static str,
        figure: f64,
        from: String,
        better: fn(f64, f64) -> bool,
    ) {
        match self.rows.iter_mut().find(|(n, _, _)| *n == name) {
            Some(row) if better(figure, row.1) => *row = (name, figure, from),
            Some(_) => {}
            None => self.rows.push((name, figure, from)),
        }
    }

    /// One `goal.NAME ...` line per goal, in the order.
    pub fn lines(&self) -> Vec<String> {
        // (name, target, whether the figure must be at least the target)
        let targets: [(&str, f64, bool); 14] = [
            ("copy_pct_of_memcpy", 90.0, true),
            ("elementwise_pct_of_memcpy", 90.0, true),
            ("reduction_pct_of_memcpy", 80.0, true),
            ("copy_f16_pct_of_memcpy", 90.0, true),
            ("copy_bf16_pct_of_memcpy", 90.0, true),
            ("elementwise_f16_pct_of_memcpy", 90.0, true),
            ("elementwise_bf16_pct_of_memcpy", 90.0, true),
            ("reduction_bf16_pct_of_memcpy", 80.0, true),
            ("two_program_fused_ratio", 1.2, false),
            ("pipeline_ratio", 1.2, false),
            ("call_overhead_ratio", 1.5, false),
            ("embedding_call_ratio", 1.2, false),
            ("gemm_vs_cublas", 0.6, true),
            ("stream_k_vs_data_parallel", 1.3, true),
        ];
        targets
            .into_iter()
            .map(
                |(name, target, at_least)| match self.rows.iter().find(|(n, _, _)| *n == name) {
                    Some((_, figure, from)) => {
                        let met = if at_least {
                            *figure >= target
                        } else {
                            *figure <= target
                        };
                        format!(
                            "goal.{name} figure={figure:.3} target={target} {} ({from})",
                            if met { "met" } else { "NOT met" }
                        )
                    }
                    None => format!("goal.{name} not measured"),
                },
            )
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_goal_keeps_its_best_figure_and_is_judged_against_its_target() {
        let mut goals = Goals::default();
        goals.at_least("copy_pct_of_memcpy", 85.0, "copy.a".into());
        goals.at_least("copy_pct_of_memcpy", 97.3, "copy.b".into());
        goals.at_least("copy_pct_of_memcpy", 90.0, "copy.c".into());
        goals.at_least("reduction_pct_of_memcpy", 79.0, "reduction.a".into());
        goals.at_most("pipeline_ratio", 1.4, "pipeline.a".into());
        goals.at_most("pipeline_ratio", 0.976, "pipeline.b".into());
        goals.at_most("call_overhead_ratio", 1.5, "call".into());
        goals.at_least("stream_k_vs_data_parallel", 1.25, "gemm a".into());
        goals.at_least("stream_k_vs_data_parallel", 1.31, "gemm b".into());
        assert_eq!(
            goals.lines(),
            [
                "goal.copy_pct_of_memcpy figure=97.300 target=90 met (copy.b)",
                "goal.elementwise_pct_of_memcpy not measured",
                "goal.reduction_pct_of_memcpy figure=79.000 target=80 NOT met (reduction.a)",
                "goal.copy_f16_pct_of_memcpy not measured",
                "goal.copy_bf16_pct_of_memcpy not measured",
                "goal.elementwise_f16_pct_of_memcpy not measured",
                "goal.elementwise_bf16_pct_of_memcpy not measured",
                "goal.reduction_bf16_pct_of_memcpy not measured",
                "goal.two_program_fused_ratio not measured",
                "goal.pipeline_ratio figure=0.976 target=1.2 met (pipeline.b)",
                "goal.call_overhead_ratio figure=1.500 target=1.5 met (call)",
                "goal.embedding_call_ratio not measured",
                "goal.gemm_vs_cublas not measured",
                "goal.stream_k_vs_data_parallel figure=1.310 target=1.3 met (gemm b)",
            ]
        );
    }
}
