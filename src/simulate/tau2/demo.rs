//! The built-in `demo` domain: a tiny gift shop invented for ppol (not τ² data), in τ²'s file
//! format, so episodes can run without downloading anything: its embedded files (in
//! `src/simulate/tau2/demo/`, parsed by `data::Domain::load`), its database and its tools.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::pycall::{self, key, Ret, ToolRes, Validator};
use super::pyjson::py_round;
use super::{en, get_mut, s, Table, ToolDef};

/// The demo domain's files, embedded (`data::Domain::load` parses them): each with the path
/// its errors name.
pub(crate) const DB: (&str, &str) = (include_str!("demo/db.json"), "<ppol demo>/db.json");
pub(crate) const TASKS: (&str, &str) = (include_str!("demo/tasks.json"), "<ppol demo>/tasks.json");
pub(crate) const POLICY: &str = include_str!("demo/policy.md");
pub(crate) const SPLITS: (&str, &str) = (
    include_str!("demo/split_tasks.json"),
    "<ppol demo>/split_tasks.json",
);

/// A customer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Customer {
    pub customer_id: String,
    pub name: String,
    pub email: String,
    pub address: String,
    pub store_credit: f64,
    pub orders: Vec<String>,
}

/// A product.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Product {
    pub product_id: String,
    pub name: String,
    pub price: f64,
    pub in_stock: bool,
}

/// An order line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OrderLine {
    pub product_id: String,
    pub name: String,
    pub quantity: i64,
    pub price: f64,
}

/// An order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Order {
    pub order_id: String,
    pub customer_id: String,
    pub items: Vec<OrderLine>,
    pub status: String,
    pub payment: String,
    pub total: f64,
    pub shipping_address: String,
    #[serde(default)]
    pub cancel_reason: Option<String>,
    #[serde(default)]
    pub refund: Option<f64>,
}

/// The demo database.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DemoDb {
    #[serde(with = "super::table")]
    pub customers: Table<Customer>,
    #[serde(with = "super::table")]
    pub products: Table<Product>,
    #[serde(with = "super::table")]
    pub orders: Table<Order>,
}

impl PartialEq for DemoDb {
    fn eq(&self, other: &Self) -> bool {
        super::table_eq(&self.customers, &other.customers)
            && super::table_eq(&self.products, &other.products)
            && super::table_eq(&self.orders, &other.orders)
    }
}

const ORDER_ID: &str = "The order id, such as '#P1001' (with the leading '#').";

/// The demo tools.
pub(crate) fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef::new("find_customer_by_email", "Find a customer id by email address.")
            .req("email", s("The customer's email, such as 'someone@example.com'.")),
        ToolDef::new("get_customer_details", "Get a customer's profile, store credit and order ids.")
            .req("customer_id", s("The customer id, such as 'ada_moss_101'.")),
        ToolDef::new("get_order_details", "Get the items, status, payment and address of an order.")
            .req("order_id", s(ORDER_ID)),
        ToolDef::new("get_product_details", "Get the name, price and stock of a product.")
            .req("product_id", s("The product id, such as 'P01'.")),
        ToolDef::new(
            "cancel_order",
            "Cancel an order that has not shipped yet (status 'placed'). Explain the details and get explicit confirmation (yes) first. Store-credit payments are refunded to store credit immediately; card payments in 5-7 business days.",
        )
        .req("order_id", s(ORDER_ID))
        .req("reason", en("Why the order is cancelled.", &["no longer needed", "ordered by mistake"])),
        ToolDef::new(
            "return_order",
            "Request the return of a whole delivered order (status 'delivered'). Explain the details and get explicit confirmation (yes) first. The refund goes to the original payment; store credit is refunded immediately.",
        )
        .req("order_id", s(ORDER_ID)),
        ToolDef::new(
            "change_shipping_address",
            "Change the shipping address of an order that has not shipped yet (status 'placed'). Get explicit confirmation (yes) first.",
        )
        .req("order_id", s(ORDER_ID))
        .req("address", s("The full new address on one line, such as '1 Main St, Springfield, IL 62701'.")),
        ToolDef::new("calculate", "Calculate the result of a mathematical expression.")
            .req("expression", s("The mathematical expression to calculate, such as '2 + 2'. The expression can contain numbers, operators (+, -, *, /), parentheses, and spaces.")),
        ToolDef::new(
            "transfer_to_human_agents",
            "Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user explicitly asks for a human agent, or the policy and tools cannot solve the issue.",
        )
        .req("summary", s("A summary of the user's issue.")),
    ]
}

fn json_of<T: Serialize>(v: &T) -> Ret {
    Ret::Json(serde_json::to_value(v).unwrap_or(Value::Null))
}

fn order_id(db: &DemoDb, v: &Value) -> std::result::Result<String, String> {
    key(v)
        .filter(|k| db.orders.contains_key(*k))
        .map(str::to_string)
        .ok_or_else(|| "Order not found".into())
}

fn refund_store_credit(db: &mut DemoDb, order: &Order) {
    if order.payment == "store_credit" {
        if let Some(c) = get_mut(&mut db.customers, &order.customer_id) {
            c.store_credit = py_round(c.store_credit + order.total, 2);
        }
    }
}

/// Run a demo tool (arguments already bound).
pub(crate) fn call(db: &mut DemoDb, name: &str, a: &Map<String, Value>) -> ToolRes {
    let arg = |k: &str| a.get(k).unwrap_or(&Value::Null);
    match name {
        "find_customer_by_email" => {
            let email = pycall::lower(arg("email"))?;
            db.customers
                .values()
                .find(|c| c.email.to_lowercase() == email)
                .map(|c| Ret::Text(c.customer_id.clone()))
                .ok_or_else(|| "Customer not found".into())
        }
        "get_customer_details" => key(arg("customer_id"))
            .and_then(|k| db.customers.get(k))
            .map(|c| json_of(&**c))
            .ok_or_else(|| "Customer not found".into()),
        "get_order_details" => {
            let id = order_id(db, arg("order_id"))?;
            Ok(json_of(&*db.orders[&id]))
        }
        "get_product_details" => key(arg("product_id"))
            .and_then(|k| db.products.get(k))
            .map(|p| json_of(&**p))
            .ok_or_else(|| "Product not found".into()),
        "cancel_order" => {
            let id = order_id(db, arg("order_id"))?;
            if db.orders[&id].status != "placed" {
                return Err("Only placed orders can be cancelled".into());
            }
            let reason = match arg("reason").as_str() {
                Some(r @ ("no longer needed" | "ordered by mistake")) => r.to_string(),
                _ => return Err("Invalid reason".into()),
            };
            let order = get_mut(&mut db.orders, &id).expect("order exists");
            order.status = "cancelled".into();
            order.cancel_reason = Some(reason);
            order.refund = Some(order.total);
            let order = order.clone();
            refund_store_credit(db, &order);
            Ok(json_of(&order))
        }
        "return_order" => {
            let id = order_id(db, arg("order_id"))?;
            if db.orders[&id].status != "delivered" {
                return Err("Only delivered orders can be returned".into());
            }
            let order = get_mut(&mut db.orders, &id).expect("order exists");
            order.status = "return requested".into();
            order.refund = Some(order.total);
            let order = order.clone();
            refund_store_credit(db, &order);
            Ok(json_of(&order))
        }
        "change_shipping_address" => {
            let id = order_id(db, arg("order_id"))?;
            if db.orders[&id].status != "placed" {
                return Err("Only placed orders can be changed".into());
            }
            let mut v = Validator::new("ShippingAddress", a);
            let address = v.string("address");
            v.finish()?;
            if address.trim().is_empty() {
                return Err("Address must not be empty".into());
            }
            let order = get_mut(&mut db.orders, &id).expect("order exists");
            order.shipping_address = address;
            Ok(json_of(&*order))
        }
        "calculate" => super::calc::calculate(arg("expression")).map(Ret::Text),
        "transfer_to_human_agents" => Ok(Ret::Text("Transfer successful".into())),
        other => Err(format!("Tool '{other}' not found.")),
    }
}
