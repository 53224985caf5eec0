//! Items: constants, meshes, residents, kernels, helper functions, maps, calls, and a file's `case` section.

use super::{PResult, Parser};
use crate::backend::ErrorClass;
use crate::case::{CaseSpec, CompareMode, Expectation, Generator};
use crate::ir::*;
use crate::text::lexer::TokenKind;

/// What a `const` item declares.
pub(super) enum ConstItem {
    Scalar(Const),
    Table(ConstTable),
}

impl Parser<'_> {
    /// Collects the `const` items' values before anything else is parsed,
    /// so that a type may name a constant declared further down. A
    /// malformed `const` is skipped here and reported by the main pass.
    pub(super) fn prescan_consts(&mut self) {
        let mut depth = 0usize;
        for index in 0..self.tokens.len() {
            match &self.tokens[index].kind {
                TokenKind::Punct("{") => depth += 1,
                TokenKind::Punct("}") => depth = depth.saturating_sub(1),
                TokenKind::Word(word) if depth == 0 && word == "const" => {
                    let resume = self.pos;
                    self.pos = index;
                    if let Ok(ConstItem::Scalar(c)) = self.const_item() {
                        self.consts.entry(c.name).or_insert(c.value);
                    }
                    self.pos = resume;
                }
                _ => {}
            }
        }
    }

    /// `const NAME: TYPE = LITERAL;` or a table, `const NAME: TYPE[LEN] =
    /// [LITERAL, ...];`. An integer literal takes the declared integer type
    /// when it holds the value (`const N: u32 = 16;`).
    pub(super) fn const_item(&mut self) -> PResult<ConstItem> {
        self.bump();
        let (name, _) = self.name("a constant name after `const`")?;
        self.expect_punct(":", &format!("after the constant name `{name}`"))?;
        let ty = self.scalar_type("for the constant")?;
        if self.is_punct("[") {
            return self.const_table(name, ty).map(ConstItem::Table);
        }
        self.expect_punct("=", &format!("after the type of `{name}`"))?;
        let value = self.const_value(&name, ty)?;
        self.expect_semicolon("after the constant")?;
        // An override of another type is left out here and reported by
        // `text::parse_file_with`.
        let value = match self.overrides.get(&name) {
            Some(given) if given.ty() == value.ty() => *given,
            _ => value,
        };
        Ok(ConstItem::Scalar(Const { name, value }))
    }

    /// The rest of `const NAME: TYPE[LEN] = [v0, v1, ...];` from `[`: as
    /// many literals as `LEN` (a count or an integer constant) says.
    fn const_table(&mut self, name: Name, elem: ScalarType) -> PResult<ConstTable> {
        self.bump();
        let len = self.count_or_const("a table length")?;
        self.expect_punct("]", &format!("after the length of the table `{name}`"))?;
        self.expect_punct("=", &format!("after the type of `{name}`"))?;
        self.expect_punct("[", &format!("before the values of the table `{name}`"))?;
        let mut values = Vec::new();
        while !self.is_punct("]") {
            values.push(self.const_value(&name, elem)?);
            if !self.is_punct("]") {
                self.expect_punct(",", &format!("between the values of the table `{name}`"))?;
            }
        }
        let close = self.peek().clone();
        self.bump();
        if values.len() != len as usize {
            return Err(self.error_at_token(
                &close,
                format!(
                    "the table `{name}` is declared with {len} values but lists {}",
                    values.len()
                ),
            ));
        }
        self.expect_semicolon("after the table")?;
        Ok(ConstTable { name, elem, values })
    }

    /// A literal of the constant `name`'s declared type `ty`.
    fn const_value(&mut self, name: &str, ty: ScalarType) -> PResult<Literal> {
        let token = self.peek().clone();
        let literal = self.literal()?;
        let value = match (literal, ty) {
            (lit, ty) if lit.ty() == ty => Some(lit),
            (Literal::I32(v), ScalarType::U32) => u32::try_from(v).ok().map(Literal::U32),
            (Literal::U32(v), ScalarType::I32) => i32::try_from(v).ok().map(Literal::I32),
            _ => None,
        };
        let Some(value) = value else {
            return Err(self.error_at_token(
                &token,
                format!(
                    "the constant `{name}` is declared `{ty}` but its value is a `{}` literal",
                    literal.ty()
                ),
            ));
        };
        Ok(value)
    }

    /// The items of a file: the module, and its case section if it has one.
    pub(super) fn file(&mut self) -> PResult<(Module, Option<CaseSpec>)> {
        let mut module = Module::default();
        let mut case = None;
        self.prescan_consts();
        loop {
            let start = self.peek().clone();
            match self.word_at(0) {
                None if self.at_eof() => return Ok((module, case)),
                Some("const") => match self.const_item()? {
                    ConstItem::Scalar(constant) => {
                        self.record(IrPath(vec![PathStep::Const(constant.name.clone())]), &start);
                        module.consts.push(constant);
                    }
                    ConstItem::Table(table) => {
                        self.record(IrPath(vec![PathStep::Const(table.name.clone())]), &start);
                        module.tables.push(table);
                    }
                },
                Some("mesh") => {
                    let mesh = self.mesh()?;
                    self.record(IrPath(vec![PathStep::Mesh(mesh.name.clone())]), &start);
                    module.meshes.push(mesh);
                }
                Some("resident") => {
                    let resident = self.resident()?;
                    self.record(
                        IrPath(vec![PathStep::Resident(resident.name.clone())]),
                        &start,
                    );
                    module.residents.push(resident);
                }
                Some("fn") => {
                    let function = self.function()?;
                    self.record(
                        IrPath(vec![PathStep::Function(function.name.clone())]),
                        &start,
                    );
                    module.functions.push(function);
                }
                Some("kernel") => {
                    let kernel = self.kernel()?;
                    self.record(IrPath(vec![PathStep::Kernel(kernel.name.clone())]), &start);
                    module.kernels.push(kernel);
                }
                Some("map") => {
                    let map = self.map()?;
                    self.record(IrPath(vec![PathStep::Map(map.name.clone())]), &start);
                    module.maps.push(map);
                }
                Some("call") => {
                    let call = self.call()?;
                    self.record(IrPath(vec![PathStep::Call(module.calls.len())]), &start);
                    module.calls.push(call);
                }
                Some("case") => {
                    if case.is_some() {
                        return Err(self.error_at_token(
                            &start,
                            "a file has at most one `case` section".to_string(),
                        ));
                    }
                    case = Some(self.case()?);
                    self.record(IrPath(vec![PathStep::Case]), &start);
                }
                _ => {
                    return Err(self.expected(
                        "an item (`const`, `mesh`, `resident`, `fn`, `kernel`, `map`, `call` or `case`)",
                    ))
                }
            }
        }
    }

    pub(super) fn axis(&mut self) -> PResult<Axis> {
        let (name, _) = self.name("an axis name")?;
        self.expect_punct("=", &format!("after the axis name `{name}`"))?;
        let size = self.count_or_const("an axis size")?;
        Ok(Axis { name, size })
    }

    pub(super) fn mesh(&mut self) -> PResult<Mesh> {
        self.bump();
        let (name, _) = self.name("a mesh name after `mesh`")?;
        self.expect_punct("{", "after the mesh name")?;
        let (mut grid, mut cluster, mut threads) = (None, None, None);
        loop {
            let token = self.peek().clone();
            let word = self.word_at(0).map(str::to_string);
            match word.as_deref() {
                Some(w @ ("grid" | "cluster")) => {
                    self.bump();
                    let axes = self.list("[", "]", &format!("after `{w}`"), |p| p.axis())?;
                    self.expect_semicolon(&format!("after the `{w}` axes"))?;
                    let slot = if w == "grid" { &mut grid } else { &mut cluster };
                    if slot.replace(axes).is_some() {
                        return Err(self.error_at_token(
                            &token,
                            format!("duplicate `{w}` line in mesh `{name}`"),
                        ));
                    }
                }
                Some("threads") => {
                    self.bump();
                    let axes = if self.is_punct("[") {
                        self.list("[", "]", "after `threads`", |p| p.axis())?
                    } else {
                        vec![]
                    };
                    let axis = if axes.is_empty() {
                        (self.axis()?, vec![])
                    } else {
                        let size = axes
                            .iter()
                            .try_fold(1u32, |n, a| n.checked_mul(a.size))
                            .unwrap_or(u32::MAX);
                        (
                            Axis {
                                name: LINEAR_THREADS.to_string(),
                                size,
                            },
                            axes,
                        )
                    };
                    self.expect_semicolon("after the thread axis")?;
                    if threads.replace(axis).is_some() {
                        return Err(self.error_at_token(
                            &token,
                            format!("duplicate `threads` line in mesh `{name}`"),
                        ));
                    }
                }
                _ if self.is_punct("}") => {
                    let Some((threads, thread_axes)) = threads else {
                        return Err(self.expected(&format!("a `threads` line in mesh `{name}`")));
                    };
                    self.bump();
                    return Ok(Mesh {
                        name,
                        grid: grid.unwrap_or_default(),
                        cluster: cluster.unwrap_or_default(),
                        threads,
                        thread_axes,
                    });
                }
                _ => return Err(self.expected("`grid`, `cluster`, `threads` or `}` in a mesh")),
            }
        }
    }

    pub(super) fn resident(&mut self) -> PResult<Resident> {
        self.bump();
        let (name, _) = self.name("a name after `resident`")?;
        self.expect_punct(":", &format!("after the name `{name}`"))?;
        let Some(space) = self.space() else {
            return Err(self.expected("a ref type (`gmem`, `smem`, `sem` or `local`)"));
        };
        let ty = self.ref_type(space)?;
        let zeroed = self.eat_word("zeroed");
        self.expect_semicolon("after the resident")?;
        Ok(Resident { name, ty, zeroed })
    }

    pub(super) fn params(&mut self, path: &IrPath, after: &str) -> PResult<Vec<Param>> {
        self.list("(", ")", after, |p| {
            let (param, start) = p.name("a parameter name")?;
            p.expect_punct(":", &format!("after the parameter name `{param}`"))?;
            let ty = p.ty()?;
            p.record(path.child(PathStep::Param(param.clone())), &start);
            match &ty {
                Type::Scalar(t) => p.names.bind_scalar(&param, *t),
                Type::Ref(r) => p.names.bind_ref(&param, r.clone()),
            }
            Ok(Param { name: param, ty })
        })
    }

    pub(super) fn kernel(&mut self) -> PResult<Kernel> {
        self.bump();
        let (name, _) = self.name("a kernel name after `kernel`")?;
        let kernel_path = IrPath(vec![PathStep::Kernel(name.clone())]);
        self.names = Scope::new();
        let params = self.params(&kernel_path, "after the kernel name")?;
        let body = self.block(&kernel_path, "before the kernel body")?;
        Ok(Kernel { name, params, body })
    }

    /// `fn name(params) [-> type] { body }`
    pub(super) fn function(&mut self) -> PResult<Function> {
        self.bump();
        let (name, _) = self.name("a function name after `fn`")?;
        let path = IrPath(vec![PathStep::Function(name.clone())]);
        self.names = Scope::new();
        let params = self.params(&path, "after the function name")?;
        let result = if self.eat_punct("->") {
            Some(self.scalar_type("as the result type")?)
        } else {
            None
        };
        let body = self.block(&path, "before the function body")?;
        Ok(Function {
            name,
            params,
            result,
            body,
        })
    }

    pub(super) fn operand(&mut self, map_path: &IrPath) -> PResult<Operand> {
        let (name, start) = self.name("an operand name")?;
        self.expect_punct(":", &format!("after the operand name `{name}`"))?;
        let ty = self.ty()?;
        let mut operand = Operand {
            name,
            ty,
            zeroed: false,
            resident: false,
        };
        loop {
            if self.eat_word("zeroed") {
                operand.zeroed = true;
            } else if self.eat_word("resident") {
                operand.resident = true;
            } else {
                break;
            }
        }
        self.record(
            map_path.child(PathStep::Operand(operand.name.clone())),
            &start,
        );
        Ok(operand)
    }

    pub(super) fn map(&mut self) -> PResult<MpmdMap> {
        self.bump();
        let (name, _) = self.name("a map name after `map`")?;
        let path = IrPath(vec![PathStep::Map(name.clone())]);
        self.expect_punct("{", "after the map name")?;
        let mut map = MpmdMap {
            name,
            programs: vec![],
            inputs: vec![],
            outputs: vec![],
            scalars: vec![],
            scratch: vec![],
            aliases: vec![],
            fast_math: false,
            debug: false,
        };
        let mut seen: Vec<String> = Vec::new();
        while !self.eat_punct("}") {
            let token = self.peek().clone();
            let Some(word) = self.word_at(0).map(str::to_string) else {
                return Err(self.expected("a map line (`programs`, `inputs`, ...) or `}`"));
            };
            if seen.contains(&word) {
                return Err(self.error_at_token(
                    &token,
                    format!("duplicate `{word}` line in map `{}`", map.name),
                ));
            }
            match word.as_str() {
                "programs" => {
                    self.bump();
                    let mut index = 0;
                    map.programs = self.list("[", "]", "after `programs`", |p| {
                        let (mesh, start) = p.name("a mesh name")?;
                        p.expect_punct(":", &format!("after the mesh name `{mesh}`"))?;
                        let (kernel, _) = p.name("a kernel name")?;
                        index += 1;
                        p.record(path.child(PathStep::Program(index - 1)), &start);
                        Ok(Program { mesh, kernel })
                    })?;
                }
                "inputs" | "outputs" | "scalars" | "scratch" => {
                    self.bump();
                    let list = self.list("[", "]", &format!("after `{word}`"), |p| {
                        p.operand(&path)
                    })?;
                    match word.as_str() {
                        "inputs" => map.inputs = list,
                        "outputs" => map.outputs = list,
                        "scalars" => map.scalars = list,
                        _ => map.scratch = list,
                    }
                }
                "aliases" => {
                    self.bump();
                    map.aliases = self.list("[", "]", "after `aliases`", |p| {
                        let (input, _) = p.name("an input name")?;
                        p.expect_punct("->", &format!("after the input `{input}`"))?;
                        let (output, _) = p.name("an output name")?;
                        Ok(Alias { input, output })
                    })?;
                }
                "fast_math" => {
                    self.bump();
                    map.fast_math = true;
                }
                "debug" => {
                    self.bump();
                    map.debug = true;
                }
                _ => {
                    return Err(self.expected(
                        "`programs`, `inputs`, `outputs`, `scalars`, `scratch`, `aliases`, `fast_math`, `debug` or `}` in a map",
                    ))
                }
            }
            self.expect_semicolon(&format!("after the `{word}` line"))?;
            seen.push(word);
        }
        Ok(map)
    }

    pub(super) fn call(&mut self) -> PResult<Call> {
        self.bump();
        let (map, _) = self.name("a map name after `call`")?;
        let scalars = self.list("(", ")", "after the map name", |p| {
            let (name, _) = p.name("a scalar name")?;
            p.expect_punct("=", &format!("after the scalar name `{name}`"))?;
            Ok((name, p.literal()?))
        })?;
        self.expect_semicolon("after the call")?;
        Ok(Call { map, scalars })
    }

    pub(super) fn generator(&mut self) -> PResult<Generator> {
        let token = self.peek().clone();
        let word = self.word_at(0).map(str::to_string);
        let range = |p: &mut Self, f: &str| -> PResult<(Literal, Literal)> {
            p.expect_punct("(", &format!("after `{f}`"))?;
            let lo = p.literal()?;
            p.expect_punct(",", "after the lower bound")?;
            let hi = p.literal()?;
            p.expect_punct(")", "after the upper bound")?;
            Ok((lo, hi))
        };
        let generator = match word.as_deref() {
            Some("uniform") => {
                self.bump();
                let (lo, hi) = range(self, "uniform")?;
                Generator::Uniform { lo, hi }
            }
            Some("nonzero") => {
                self.bump();
                let (lo, hi) = range(self, "nonzero")?;
                Generator::NonZero { lo, hi }
            }
            Some("special") => {
                self.bump();
                Generator::Special
            }
            Some("iota") => {
                self.bump();
                Generator::Iota
            }
            Some("constant") => {
                self.bump();
                self.expect_punct("(", "after `constant`")?;
                let value = self.literal()?;
                self.expect_punct(")", "after the constant")?;
                Generator::Constant(value)
            }
            Some("index_into") => {
                self.bump();
                self.expect_punct("(", "after `index_into`")?;
                let (operand, _) = self.name("an operand name")?;
                self.expect_punct(",", "after the operand name")?;
                let dim = self.count("a dimension")?;
                self.expect_punct(")", "after the dimension")?;
                Generator::IndexInto { operand, dim }
            }
            _ => {
                return Err(self.error_at_token(
                    &token,
                    format!(
                        "expected a generator (`uniform`, `nonzero`, `special`, `constant`, `iota` or `index_into`), found {}",
                        self.found()
                    ),
                ))
            }
        };
        Ok(generator)
    }

    pub(super) fn compare_mode(&mut self) -> PResult<CompareMode> {
        let mode = match self.word_at(0) {
            Some("exact") => CompareMode::Exact,
            Some("profile") => CompareMode::Profile,
            Some("multiset") => CompareMode::Multiset,
            Some("ignore") => CompareMode::Ignore,
            Some("mma") => CompareMode::Mma,
            Some("ulp") => {
                self.bump();
                self.expect_punct("(", "after `ulp`")?;
                let n = self.count("a number of ULPs")?;
                self.expect_punct(")", "after the number of ULPs")?;
                return Ok(CompareMode::Ulp(n));
            }
            _ => return Err(self.expected(
                "a comparison mode (`exact`, `ulp(n)`, `profile`, `multiset`, `ignore` or `mma`)",
            )),
        };
        self.bump();
        Ok(mode)
    }

    pub(super) fn expectation(&mut self) -> PResult<Expectation> {
        match self.word_at(0) {
            Some("ok") => {
                self.bump();
                Ok(Expectation::Ok)
            }
            Some("fails") => {
                self.bump();
                self.expect_punct("(", "after `fails`")?;
                let class = ErrorClass::ALL
                    .into_iter()
                    .find(|c| self.word_at(0) == Some(c.keyword()));
                let Some(class) = class else {
                    let all: Vec<String> = ErrorClass::ALL
                        .iter()
                        .map(|c| format!("`{}`", c.keyword()))
                        .collect();
                    return Err(self.expected(&format!("an error class ({})", all.join(", "))));
                };
                self.bump();
                self.expect_punct(")", "after the error class")?;
                Ok(Expectation::Fails(class))
            }
            Some("reject") => {
                self.bump();
                self.expect_punct("(", "after `reject`")?;
                let code = self.any_word("an error code (`E0001`, ...)")?;
                self.expect_punct(")", "after the error code")?;
                Ok(Expectation::Reject(code))
            }
            _ => Err(self.expected("an expectation (`ok`, `fails(class)` or `reject(code)`)")),
        }
    }

    pub(super) fn case(&mut self) -> PResult<CaseSpec> {
        self.bump();
        self.expect_punct("{", "after `case`")?;
        let mut case = CaseSpec::default();
        let (mut expect_seen, mut tags_seen) = (false, false);
        while !self.eat_punct("}") {
            let token = self.peek().clone();
            let word = self.word_at(0).map(str::to_string);
            match word.as_deref() {
                Some(w @ ("generate" | "compare")) => {
                    self.bump();
                    let (name, _) = self.name(&format!("an operand name after `{w}`"))?;
                    self.expect_punct("=", &format!("after the operand name `{name}`"))?;
                    if w == "generate" {
                        let generator = self.generator()?;
                        case.generators.push((name, generator));
                    } else {
                        let mode = self.compare_mode()?;
                        case.compares.push((name, mode));
                    }
                    self.expect_semicolon(&format!("after the `{w}` line"))?;
                }
                Some(w @ ("expect" | "tags")) => {
                    let seen = if w == "expect" {
                        &mut expect_seen
                    } else {
                        &mut tags_seen
                    };
                    if std::mem::replace(seen, true) {
                        return Err(self
                            .error_at_token(&token, format!("duplicate `{w}` line in the case")));
                    }
                    self.bump();
                    if w == "expect" {
                        case.expect = self.expectation()?;
                    } else {
                        // Tags are free-form words; keywords are fine.
                        case.tags = self.list("[", "]", "after `tags`", |p| p.any_word("a tag"))?;
                    }
                    self.expect_semicolon(&format!("after the `{w}` line"))?;
                }
                _ => {
                    return Err(
                        self.expected("`generate`, `compare`, `expect`, `tags` or `}` in the case")
                    )
                }
            }
        }
        Ok(case)
    }
}
